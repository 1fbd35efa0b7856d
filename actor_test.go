package almanac_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestWithActor: a client made for another actor records that actor in the
// history of what it changes; the client it came from keeps its own; an
// actor that cannot be stored is refused.
func TestWithActor(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Actor: "page"})
	require.NoError(t, err)
	s, err := c.Series(ctx, "report", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	_, err = c.Materialize(ctx, s, from, from.Add(3*time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)

	alice, err := c.WithActor("alice@example")
	require.NoError(t, err)
	_, err = alice.Skip(ctx, s, from, from.Add(time.Hour), almanac.WriteOptions{Reason: "no data"})
	require.NoError(t, err)
	_, err = c.Skip(ctx, s, from.Add(time.Hour), from.Add(2*time.Hour), almanac.WriteOptions{Reason: "no data"})
	require.NoError(t, err)
	_, err = alice.Reopen(ctx, s, from, from.Add(2*time.Hour), almanac.WriteOptions{Reason: "data came"})
	require.NoError(t, err)

	actors := func(at time.Time) []string {
		h, err := c.History(ctx, s, at)
		require.NoError(t, err)
		var out []string
		for _, e := range h.Events {
			out = append(out, e.Event+" by "+e.Actor)
		}
		return out
	}
	require.Equal(t, []string{"skipped by alice@example", "reopened by alice@example"}, actors(from))
	require.Equal(t, []string{"skipped by page", "reopened by alice@example"}, actors(from.Add(time.Hour)))

	for _, bad := range []string{"", "two\nlines", "\u202eecila"} {
		_, err := c.WithActor(bad)
		if bad == "" {
			require.NoError(t, err, "empty: the database role, as Options.Actor")
			continue
		}
		require.ErrorIs(t, err, almanac.ErrInvalid, "%q", bad)
	}
}
