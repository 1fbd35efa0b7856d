package coverage

import "github.com/almanacdev/almanac/slot"

// maxActor bounds Options.Actor, stored in every history row the client
// writes. Reasons are bounded by slot.CheckReason.
const maxActor = 200

// CheckActor reports whether actor can be stored as Options.Actor: one line
// of at most 200 bytes of valid UTF-8 without control or invisible
// characters (slot.CheckText). New checks it too. Errors wrap
// slot.ErrInvalid and name the value.
func CheckActor(actor string) error { return slot.CheckText("actor", actor, maxActor) }
