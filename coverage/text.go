package coverage

import (
	"fmt"
	"unicode/utf8"

	"github.com/almanacdev/almanac/slot"
)

// Bounds of the free text the client stores: reasons become slot messages
// and history messages, the actor a history column.
const (
	maxReason = 1024
	maxActor  = 200
)

// checkText reports whether s may be stored as what: at most max bytes of
// valid UTF-8 without control characters. Errors wrap slot.ErrInvalid and
// name the value.
func checkText(what, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w: %s %.40q… is %d bytes; expected at most %d", slot.ErrInvalid, what, s, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", slot.ErrInvalid, what, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return fmt.Errorf("%w: %s %q contains control character %U", slot.ErrInvalid, what, s, r)
		}
	}
	return nil
}

// CheckReason reports whether reason can be stored as a re-open or skip
// reason: at most 1024 bytes of valid UTF-8 without control characters.
// Reopen and Skip check it too; call it to refuse bad input before doing
// anything else. Errors wrap slot.ErrInvalid and name the value.
func CheckReason(reason string) error { return checkText("reason", reason, maxReason) }

// CheckActor reports whether actor can be stored as Options.Actor: at most
// 200 bytes of valid UTF-8 without control characters. New checks it too.
// Errors wrap slot.ErrInvalid and name the value.
func CheckActor(actor string) error { return checkText("actor", actor, maxActor) }
