package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/pgtest"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/web"
)

// BenchmarkPage1M measures the coverage page on a series of 1,000,000
// one-minute slots in Berlin (two years, four DST changes): 97 % complete,
// the rest skipped, open, failed, parked, with 5,000 missing. It reports
// the data endpoint's answer for the whole series (day cells) and for one
// month (hour cells), and the time a headless Chromium takes from
// navigation to a drawn calendar of the whole series:
//
//	go test ./web -run '^$' -bench Page1M -benchtime 20x
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
		FROM generate_series(0, 999999) AS i, LATERAL (SELECT $1::timestamptz + i * interval '1 minute' AS t) x
		WHERE i % 200 <> 7`, from)
	exec(`VACUUM ANALYZE {{schema}}.slot`)
	to := from.Add(1_000_000 * time.Minute)

	server := httptest.NewServer(web.Handler(client, web.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}))
	b.Cleanup(server.Close)
	srv := server.URL
	get := func(url string) {
		res, err := http.Get(url)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, http.StatusOK, res.StatusCode)
	}
	whole := srv + "/api/heatmap?series=big&interval=PT1M"
	month := whole + "&from=2025-03-01&to=2025-04-01"
	h, err := client.Heatmap(ctx, s, from, to, web.DefaultBuckets)
	require.NoError(b, err)
	require.Equal(b, int64(1_000_000), h.Total.Slots)
	require.Equal(b, int64(5_000), h.Total.Missing)

	p := page{b, browser(b)}
	b.ResetTimer()
	var wholeTime, monthTime, pageTime time.Duration
	for i := range b.N {
		t0 := time.Now()
		get(whole)
		t1 := time.Now()
		get(month)
		t2 := time.Now()
		require.NoError(b, chromedp.Do(p.ctx, chromedp.Navigate(fmt.Sprintf("%s/?n=%d#series=big&interval=PT1M", srv, i)),
			chromedp.Poll[chromedp.Void](`document.body.dataset.loads === "1"`)))
		require.Empty(b, p.text("#status"))
		require.NotZero(b, p.count("#grid .cell"))
		t3 := time.Now()
		wholeTime, monthTime, pageTime = wholeTime+t1.Sub(t0), monthTime+t2.Sub(t1), pageTime+t3.Sub(t2)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(wholeTime), "ms/whole-series")
	b.ReportMetric(ms(monthTime), "ms/month")
	b.ReportMetric(ms(pageTime), "ms/page")
}

