package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestPageShowsPause: the series table says a paused series is paused,
// by whom and why.
func TestPageShowsPause(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Actor: "ana@ops"})
	require.NoError(t, err)
	s, err := c.Series(ctx, "feed", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = c.Materialize(ctx, s, from, from.Add(3*time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = c.Pause(ctx, s, "vendor <outage>")
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, Options{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "by ana@ops: vendor &lt;outage&gt;")
}
