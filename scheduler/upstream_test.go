package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

// TestCommandUpstream: the command of a PT1H series after a PT1M feed gets
// the 60 feed minutes it covers, one computation key per line, and their
// count; a series without dependencies gets neither variable (see
// TestCommandEnvironment's runs, checked here too).
func TestCommandUpstream(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feed, report := series(t, "feed", "PT1M"), series(t, "report", "PT1H")
	for _, g := range []slot.Series{feed, report} {
		_, _, err := seriesdb.Add(ctx, db.Pool, db.Schema, g)
		require.NoError(t, err)
	}
	require.NoError(t, seriesdb.SetAfter(ctx, db.Pool, db.Schema, "report", report.Interval(), []slot.Series{feed}))
	for _, sql := range []string{
		`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, completed_at)
		SELECT 'feed', 'PT1M', t, t + interval '1 minute', 'COMPLETE', now()
		FROM generate_series($1::timestamptz, $1::timestamptz + interval '59 minutes', interval '1 minute') AS t`,
		`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE name = 'feed' AND slot_start = $1::timestamptz + interval '7 minutes'`,
		`UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE name = 'feed' AND slot_start = $1::timestamptz + interval '7 minutes'`,
		`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end) VALUES ('report', 'PT1H', $1, $1::timestamptz + interval '1 hour')`,
	} {
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), start)
		require.NoError(t, err)
	}

	q, err := acquire.New(ctx, db.Pool, report, acquire.Options{Schema: db.Schema})
	require.NoError(t, err)
	leases, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	stop := q.KeepAlive(ctx, leases)
	defer stop()
	dir := t.TempDir()
	cmd := Command{Path: writeScript(t, `printf '%s' "$ALMANAC_UPSTREAM" > "`+dir+`/list"; printf '%s' "$ALMANAC_UPSTREAM_COUNT" > "`+dir+`/count"`)}
	lctx, cancel := leases[0].Context(ctx)
	defer cancel()
	outcome, _, err := leases[0].Finish(ctx, cmd.LeaseHandler()(lctx, leases[0]))
	require.NoError(t, err)
	require.Equal(t, acquire.Completed, outcome)

	list, err := os.ReadFile(filepath.Join(dir, "list"))
	require.NoError(t, err)
	lines := strings.Split(string(list), "\n")
	require.Len(t, lines, 60)
	require.Equal(t, "feed 2026-01-01T00:00:00Z/PT1M 1", lines[0])
	require.Equal(t, "feed 2026-01-01T00:07:00Z/PT1M 2", lines[7], "the re-opened minute's generation")
	require.Equal(t, "feed 2026-01-01T00:59:00Z/PT1M 1", lines[59])
	n, err := os.ReadFile(filepath.Join(dir, "count"))
	require.NoError(t, err)
	require.Equal(t, "60", string(n))

	env := envOf(t, Command{})
	require.NotContains(t, env, "ALMANAC_UPSTREAM", "no dependencies, no list")
	require.NotContains(t, env, "ALMANAC_UPSTREAM_COUNT")
}

// TestUpstreamListBound: past its bound the list keeps the first whole
// lines that fit, and the count says how many there are.
func TestUpstreamListBound(t *testing.T) {
	grid := series(t, "feed", "PT1M")
	var ups []acquire.Slot
	for i := range int64(3) {
		s, err := grid.Slot(i)
		require.NoError(t, err)
		ups = append(ups, acquire.Slot{Slot: s, Name: "feed", Generation: 1})
	}
	line := func(i int) string { return fmt.Sprintf("feed 2000-01-01T00:%02d:00Z/PT1M 1", i) }
	all := line(0) + "\n" + line(1) + "\n" + line(2)
	require.Equal(t, all, upstreamList(ups, len(all)))
	require.Equal(t, line(0)+"\n"+line(1), upstreamList(ups, len(all)-1), "whole lines only")
	require.Equal(t, "", upstreamList(ups, len(line(0))-1))
	env := slotEnv(acquire.Slot{Slot: ups[0].Slot, Name: "report", Upstream: ups})
	require.Contains(t, env, "ALMANAC_UPSTREAM="+all)
	require.Contains(t, env, "ALMANAC_UPSTREAM_COUNT=3")
}
