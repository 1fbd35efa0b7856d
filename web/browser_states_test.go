package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

// TestBrowserPageStates drives the page in headless Chromium and checks
// the series' states that are not problems: the slots of a range that
// are not due yet are drawn as not due, never as missing, and a paused
// series says in the series table that it is paused, by whom and why,
// and a series whose upstream has not finished says how many of its open
// slots wait for it.
func TestBrowserPageStates(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Actor: "ana@ops"})
	require.NoError(t, err)
	feed, err := c.Series(ctx, "feed", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	// Rows up to the hour after the current one: the first slot without a
	// row ends two hours from now at the earliest, so it stays not due
	// for the whole test even when the hour turns.
	hour := time.Now().UTC().Truncate(time.Hour)
	from, to := hour.Add(-4*time.Hour), hour.Add(4*time.Hour)
	_, err = c.Materialize(ctx, feed, from, hour.Add(time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = c.Pause(ctx, feed, "vendor <outage>")
	require.NoError(t, err)

	// report's two hours wait for ingest, which has an open row for the
	// first and none for the second.
	ingest, err := c.Series(ctx, "ingest", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	report, err := c.Series(ctx, "report", "PT1H", almanac.SeriesOptions{After: []almanac.Series{ingest}})
	require.NoError(t, err)
	_, err = c.Materialize(ctx, report, from, from.Add(2*time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = c.Materialize(ctx, ingest, from, from.Add(time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)

	srv := serve(t, web.Handler(c, web.Options{CacheTTL: -1}))
	p := page{t, browser(t)}

	// The series table, drawn on the server: paused, by whom and why.
	p.navigated(srv.URL + "/")
	paused := p.text(`#series tbody tr:has(a[href*="series=feed"]) [data-k="paused"]`)
	require.Contains(t, paused, "paused since ")
	require.Contains(t, paused, "by ana@ops: vendor <outage>")
	require.Zero(t, p.count(`#series tbody tr:has(a[href*="series=report"]) [data-k="paused"]`))
	require.Zero(t, p.count(`#series tbody tr:has(a[href*="series=feed"]) [data-k="waitingUpstream"]`))
	require.Equal(t, "2 waiting for upstream", p.text(`#series tbody tr:has(a[href*="series=report"]) [data-k="waitingUpstream"]`))

	// The calendar of a range reaching into the future: five open slots
	// with rows, three not due yet, none missing.
	q := func(t time.Time) string { return strings.ReplaceAll(slot.FormatTime(t), "+", "%2B") }
	p.drawn(chromedp.Navigate(srv.URL + "/#series=feed&interval=PT1H&from=" + q(from) + "&to=" + q(to)))
	require.Equal(t, map[string]int{"open": 5, "not-due": 3}, p.states())
	require.Equal(t, 0, p.count(`#grid .cell[data-state="missing"]`))
	var label string
	p.eval(`document.querySelector('#grid .cell[data-state="not-due"]').getAttribute("aria-label")`, &label)
	require.Contains(t, label, "not due yet")

	// The report's calendar lists what its waiting slots wait on, each
	// linked to the upstream's calendar.
	p.drawn(chromedp.Navigate(srv.URL + "/#series=report&interval=PT1H"))
	require.True(t, p.visible("#waiting"))
	require.Equal(t, "2 slots wait for upstream series on:", p.text("#waiting-note"))
	require.Equal(t, 2, p.count("#waiting-rows li"))
	require.Equal(t, 1, p.count(`#waiting-rows li[data-state="open"]`))
	require.Equal(t, 1, p.count(`#waiting-rows li[data-state="missing"]`))
	require.Contains(t, p.text(`#waiting-rows li[data-state="open"]`), "waits on ingest PT1H")
	var href string
	p.eval(`document.querySelector('#waiting-rows li[data-state="open"] a.upstream-link').getAttribute("href")`, &href)
	require.Equal(t, "#"+url.Values{"series": {"ingest"}, "interval": {"PT1H"}, "slot": {slot.FormatTime(from)}}.Encode(), href)
	require.False(t, func() bool {
		p.drawn(chromedp.Navigate(srv.URL + "/#series=feed&interval=PT1H"))
		return p.visible("#waiting")
	}(), "a series without upstreams waits on nothing")
}
