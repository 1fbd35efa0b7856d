package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGuesses: each address has guessBurst tries, then one per guessEvery;
// all together allBurst, then one per allEvery; a right token gives its
// try back; an IPv6 client is its /64.
func TestGuesses(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	g := newGuesses(func() time.Time { return now })
	try := func(addr string) (bool, time.Duration, bool) {
		refund, wait, own := g.take(addr)
		return refund != nil, wait, own
	}
	for range guessBurst {
		ok, _, _ := try("192.0.2.1:5000")
		require.True(t, ok)
	}
	ok, wait, own := try("192.0.2.1:5001")
	require.False(t, ok)
	require.True(t, own)
	require.Equal(t, guessEvery, wait)
	ok, _, _ = try("192.0.2.2:5000")
	require.True(t, ok, "another address has its own tries")

	now = now.Add(guessEvery - time.Millisecond)
	ok, _, _ = try("192.0.2.1:5000")
	require.False(t, ok)
	now = now.Add(time.Millisecond)
	ok, _, _ = try("192.0.2.1:5000")
	require.True(t, ok, "one try back per guessEvery")
	ok, _, _ = try("192.0.2.1:5000")
	require.False(t, ok)

	// A right token is not counted.
	for range 3 * guessBurst {
		refund, _, _ := g.take("192.0.2.3:1")
		require.NotNil(t, refund)
		refund()
	}

	// IPv6: the /64 is one client.
	for i := range guessBurst {
		ok, _, _ := try(fmt.Sprintf("[2001:db8::%x]:443", i+1))
		require.True(t, ok)
	}
	ok, _, own = try("[2001:db8::ffff]:443")
	require.False(t, ok)
	require.True(t, own)
	ok, _, _ = try("[2001:db8:0:1::1]:443")
	require.True(t, ok, "another /64")

	// All addresses together.
	now = now.Add(time.Hour)
	for i := range allBurst {
		ok, _, _ := try(fmt.Sprintf("198.51.100.%d:1", i))
		require.True(t, ok, i)
	}
	ok, wait, own = try("203.0.113.1:1")
	require.False(t, ok)
	require.False(t, own)
	require.Equal(t, allEvery, wait)
}
