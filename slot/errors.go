package slot

import "github.com/almanacdev/almanac/internal/input"

// ErrInvalid is matched (with errors.Is) by every error this package returns
// for bad input: a malformed interval, time, zone, name or slot text, a
// reversed or oversized range, or an instant outside the supported years.
// The message names the kind and the offending value. It is the same value
// as almanac.ErrInvalid: every package of almanac returns errors that match
// it for bad input. Programs map it to "usage error"; the CLI exits 2 on it.
var ErrInvalid = input.ErrInvalid

// Kinds of bad input this package names in its errors. Each matches
// ErrInvalid.
var (
	errInterval = input.Kind("invalid interval")
	errTime     = input.Kind("invalid time")
	errZone     = input.Kind("invalid time zone")
	errSlot     = input.Kind("invalid slot")
	errRange    = input.Kind("invalid range")
	errName     = input.ErrName
)

// ErrNoSlot is returned for a grid position whose local date the time zone
// skipped entirely (Pacific/Apia skipped 2011-12-30), so the slot there
// would be empty and does not exist. It also matches ErrInvalid.
var ErrNoSlot = input.Kind("no such slot")
