package almanactest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
)

// Statuses RequireStatus knows besides the stored ones (almanac.StatusAvailable,
// StatusAcquired, StatusComplete and StatusSkip).
const (
	// Missing is a slot that is not stored: never materialized.
	Missing = "MISSING"
	// Parked is an AVAILABLE slot that gave up after its retry policy's
	// attempts and waits for Client.Retry. RequireStatus with
	// almanac.StatusAvailable does not match a parked slot.
	Parked = "PARKED"
)

// RequireStatus fails the test unless the slot of s that contains t has
// status want: almanac.StatusAvailable (and not parked), StatusAcquired,
// StatusComplete, StatusSkip, Parked or Missing. The failure names the
// slot, its status and its last message, attempts and fence. It also fails
// the test if the slot cannot be read (s not registered, t off the grid's
// range).
func RequireStatus(tb testing.TB, c *almanac.Client, s almanac.Series, t time.Time, want string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	h, err := c.History(ctx, s, t)
	if err != nil {
		tb.Fatalf("almanactest: read the slot of series %s at %s: %v", s.Name(), slot.FormatTime(t), err)
		return
	}
	got := statusOf(h)
	if got == want {
		return
	}
	var detail strings.Builder
	if cur := h.Current; cur != nil {
		fmt.Fprintf(&detail, " (attempts %d, fence %d", cur.Attempts, cur.Fence)
		if cur.Message != "" {
			fmt.Fprintf(&detail, ", message %q", cur.Message)
		}
		detail.WriteString(")")
	}
	tb.Fatalf("almanactest: slot %s of series %s is %s%s, want %s", h.Slot, s.Name(), got, detail.String(), want)
}

// statusOf is the status of h's slot as RequireStatus names it.
func statusOf(h almanac.History) string {
	switch {
	case h.Current == nil:
		return Missing
	case h.Current.Parked:
		return Parked
	default:
		return h.Current.Status
	}
}
