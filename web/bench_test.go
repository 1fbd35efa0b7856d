package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/web"
)

// BenchmarkPage1M measures the coverage page on a series of 1,000,000
// one-minute slots in Berlin (two years, four DST changes): 97 % complete,
// the rest skipped, open, failed, parked, with 5,000 missing (deleted
// after the range was recorded as stored, as a materialized series is).
// It reports the data endpoint's answer for the whole series (695 day
// cells) and for one month (744 hour cells), computed (cold) and from the
// page's cache,
// and the time a headless Chromium takes from navigation to a drawn
// calendar of the whole series: on a first visit (a new handler: one
// reading of the series, shared by the series table and the calendar) and
// from the cache:
//
//	go test ./web -run '^$' -bench Page1M -benchtime 10x
func BenchmarkPage1M(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	client, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(b, err)
	s, err := client.Series(ctx, "big", "PT1M", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(b, err)
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, s.Location())
	exec := func(sql string, args ...any) {
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(b, err)
	}
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, fail_count, not_before, message, completed_at)
		SELECT 'big', 'PT1M', t, t + interval '1 minute',
			CASE WHEN i % 100 < 97 THEN 'COMPLETE' WHEN i % 100 = 97 THEN 'SKIP' ELSE 'AVAILABLE' END,
			CASE WHEN i % 1000 = 998 THEN 3 WHEN i % 1000 = 999 THEN 1 ELSE 0 END,
			CASE WHEN i % 1000 = 998 THEN 'infinity'::timestamptz END,
			CASE WHEN i % 1000 >= 998 THEN 'upstream timeout' END,
			CASE WHEN i % 100 < 97 THEN now() END
		FROM generate_series(0, 999999) AS i, LATERAL (SELECT $1::timestamptz + i * interval '1 minute' AS t) x`, from)
	to := from.Add(1_000_000 * time.Minute)
	// The range as Client.Materialize records it once its rows are in
	// (stored: every slot has a row); the delete trigger then cuts it
	// around the 5,000 slots deleted, as it does for any delete.
	exec(`INSERT INTO {{schema}}.slot_stored (name, "interval", range_start, range_end) VALUES ('big', 'PT1M', $1, $2)`, from, to)
	exec(`DELETE FROM {{schema}}.slot WHERE name = 'big' AND (extract(epoch FROM slot_start - $1::timestamptz) / 60)::bigint % 200 = 7`, from)
	exec(`VACUUM ANALYZE {{schema}}.slot`)

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	serve := func(opts web.Options) string {
		opts.Logger = logger
		server := httptest.NewServer(web.Handler(client, opts))
		b.Cleanup(server.Close)
		return server.URL
	}
	// cold computes every answer; warm reuses them for its CacheTTL.
	cold, warm := serve(web.Options{CacheTTL: -1}), serve(web.Options{CacheTTL: time.Hour})
	get := func(url string) time.Duration {
		t0 := time.Now()
		res, err := http.Get(url)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, http.StatusOK, res.StatusCode)
		return time.Since(t0)
	}
	const whole = "/api/heatmap?series=big&interval=PT1M"
	const month = whole + "&from=2025-03-01&to=2025-04-01"
	h, err := client.Heatmap(ctx, s, from, to, 1000) // Options.Buckets' default
	require.NoError(b, err)
	require.Equal(b, int64(1_000_000), h.Total.Slots)
	require.Equal(b, int64(5_000), h.Total.Missing)
	p := page{b, browser(b)}
	render := func(base string, i int) time.Duration {
		t0 := time.Now()
		require.NoError(b, chromedp.Do(p.ctx, chromedp.Navigate(fmt.Sprintf("%s/?n=%d#series=big&interval=PT1M", base, i)),
			chromedp.Poll[chromedp.Void](`document.body.dataset.loads === "1"`)))
		d := time.Since(t0)
		require.Empty(b, p.text("#status"))
		require.Equal(b, 695, p.count("#grid .cell"), "one cell per day")
		return d
	}
	get(warm + whole)
	get(warm + month)
	render(warm, -1)

	b.ResetTimer()
	var sum [6]time.Duration
	for i := range b.N {
		for j, d := range []time.Duration{get(cold + whole), get(cold + month), get(warm + whole), get(warm + month),
			render(serve(web.Options{}), i), render(warm, i)} {
			sum[j] += d
		}
	}
	for j, name := range []string{"ms/whole-cold", "ms/month-cold", "ms/whole-cached", "ms/month-cached", "ms/page-first", "ms/page-cached"} {
		b.ReportMetric(float64(sum[j].Microseconds())/1000/float64(b.N), name)
	}
}
