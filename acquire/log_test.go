package acquire

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLogEjectionAndRefusedWrite: an ejection is a warning naming the slot
// and its new holder; the old holder's refused write is an error naming its
// owner and fence.
func TestLogEjectionAndRefusedWrite(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	var holderLog, callbackLog bytes.Buffer
	jsonLog := func(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }
	holder := f.queue(Options{Logger: jsonLog(&holderLog)})
	callback := f.queue(Options{Logger: jsonLog(&callbackLog)})
	leases, err := holder.Claim(ctx, 1)
	require.NoError(t, err)
	ejected, err := callback.Eject(ctx, leases[0].Start)
	require.NoError(t, err)
	require.ErrorIs(t, leases[0].Complete(ctx), ErrLeaseLost)

	decode := func(b *bytes.Buffer) []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			out = append(out, rec)
		}
		return out
	}
	ej := decode(&callbackLog)
	require.Len(t, ej, 1)
	require.Equal(t, "WARN", ej[0]["level"])
	require.Contains(t, ej[0]["msg"], "ejected")
	require.Equal(t, callback.Owner().String(), ej[0]["owner"])
	require.EqualValues(t, ejected.Fence, ej[0]["fence"])
	require.Equal(t, leases[0].Slot.Slot.String(), ej[0]["slot"])

	refused := decode(&holderLog)
	require.Len(t, refused, 1)
	require.Equal(t, "ERROR", refused[0]["level"])
	require.Contains(t, refused[0]["msg"], "write refused")
	require.Equal(t, holder.Owner().String(), refused[0]["owner"])
	require.EqualValues(t, leases[0].Fence, refused[0]["fence"])
	for _, k := range []string{"series", "interval", "attempt", "generation"} {
		require.Contains(t, refused[0], k)
	}
}
