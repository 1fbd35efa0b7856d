package web_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

// screenshots, when set, is the folder the browser test saves its
// screenshots in (the ones in docs/ come from it):
//
//	go test ./web -run TestBrowser -args -screenshots ../docs
var screenshots = flag.String("screenshots", "", "folder to save the coverage page's screenshots in")

// browser starts headless Chromium, as root can run it, with a fresh
// profile, in a window of 1440 by 1000 pixels; the test fails with what to
// install when there is none.
func browser(t testing.TB) context.Context {
	t.Helper()
	return browserSized(t, 1440, 1000)
}

// browserSized starts headless Chromium in a window of width by height
// pixels.
func browserSized(t testing.TB, width, height int) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no Chromium for the browser test; install: apt-get install -y chromium")
	}
	// A test's page work takes seconds; a benchmark's loops take longer.
	limit := time.Minute
	if _, bench := t.(*testing.B); bench {
		limit = 15 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height))
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	return ctx
}

// page drives the coverage page in a tab, failing the test on errors.
type page struct {
	t   testing.TB
	ctx context.Context
}

func (p page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	require.NoError(p.t, chromedp.Do(p.ctx, steps...))
}

func (p page) eval(js string, out any) {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[json.RawMessage](js))
	require.NoError(p.t, err)
	require.NoError(p.t, json.Unmarshal(v, out))
}

func (p page) text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.TextContent(chromedp.CSS(sel)))
	require.NoError(p.t, err)
	return s
}

// count returns how many elements match sel.
func (p page) count(sel string) int {
	var n int
	p.eval(`document.querySelectorAll(`+strconv.Quote(sel)+`).length`, &n)
	return n
}

// loads returns how many times the page's script finished drawing.
func (p page) loads() int {
	var n string
	p.eval(`document.body.dataset.loads || "0"`, &n)
	var i int
	_, _ = fmt.Sscan(n, &i)
	return i
}

// drawn runs steps and waits for the script to finish drawing after them.
func (p page) drawn(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	before := p.loads()
	p.do(steps...)
	p.do(chromedp.Poll[chromedp.Void](fmt.Sprintf(`Number(document.body.dataset.loads || 0) > %d`, before)))
	require.Empty(p.t, p.text("#status"), "the page reports an error")
}

// navigated loads url in the tab and waits for the first drawing.
func (p page) navigated(url string) {
	p.t.Helper()
	p.do(chromedp.Navigate(url), chromedp.Poll[chromedp.Void](`Number(document.body.dataset.loads || 0) >= 1`))
}

func (p page) screenshot(name string) {
	p.t.Helper()
	if *screenshots == "" {
		return
	}
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	require.NoError(p.t, err)
	require.NoError(p.t, os.WriteFile(filepath.Join(*screenshots, name), png, 0o644))
}

// states counts the calendar's cells by state.
func (p page) states() map[string]int {
	p.t.Helper()
	n := map[string]int{}
	p.eval(`(() => { const n = {}; for (const c of document.querySelectorAll("#grid .cell")) n[c.dataset.state] = (n[c.dataset.state] || 0) + 1; return n; })()`, &n)
	return n
}

// TestBrowser drives the page in headless Chromium against workers' real
// outcomes: the series table and the calendar's cells agree with the
// seeded states, the day clocks go forward has 23 hourly cells, a parked
// slot leads to its history, and a logged-in operator re-opens a range and
// sees its cells turn open.
func TestBrowser(t *testing.T) {
	f := seed(t)
	const aliceToken = "9b2f6d1c4e8a0b3f7d5c2e9a1f4b6d8c0e3a5f7b9d1c4e6a"
	srv := f.serve(t, web.Options{AllowActions: true, Token: testToken, Users: map[string]string{aliceToken: "alice@example"}})
	p := page{t, browser(t)}

	// The series table, drawn on the server.
	p.navigated(srv.URL + "/")
	row := `#series tbody tr `
	for k, want := range map[string]int{"slots": seedSlots, "complete": seedComplete, "skipped": seedSkipped, "open": seedOpen,
		"inFlight": seedInFlight, "failed": seedFailed, "parked": seedParked, "missing": seedMissing} {
		require.Equal(t, fmt.Sprint(want), p.text(row+`td[data-k="`+k+`"]`), k)
	}
	require.Equal(t, "81.4 %", p.text(row+`td[data-k="covered"]`))
	require.Equal(t, "Log in to act", p.text("#login-link"))

	// The calendar: one cell per hourly slot, a row per day.
	p.drawn(chromedp.Click(chromedp.CSS(`#series tbody th a`)))
	states := p.states()
	require.Equal(t, map[string]int{"complete": seedComplete, "skipped": seedSkipped, "open": seedOpen, "in-flight": seedInFlight,
		"failed": seedFailed, "parked": seedParked, "missing": seedMissing}, states)
	var rows []struct {
		Label string
		Cells int
		First string
	}
	p.eval(`[...document.querySelectorAll("#grid .row")].map(r => ({label: r.querySelector(".row-label").textContent,
		cells: r.querySelectorAll(".cell").length, first: [...r.querySelectorAll(".cell")].map(c => c.textContent).join(" ")}))`, &rows)
	require.Len(t, rows, 7)
	require.Equal(t, "Sun 2026-03-29 (23 h)", rows[3].Label)
	require.Equal(t, 23, rows[3].Cells)
	require.Contains(t, rows[3].First, "01 03", "02:00 does not exist that night")
	require.Equal(t, 24, rows[2].Cells)
	require.Equal(t, fmt.Sprint(seedMissing), p.text(`#totals [data-k="missing"] dd`))

	// With fewer cells, one per day: each takes its most urgent state.
	p.drawn(chromedp.Navigate(srv.URL + "/" + f.hash(time.Time{}, time.Time{}) + "&buckets=60"))
	states = p.states()
	require.Equal(t, map[string]int{"complete": 2, "missing": 1, "parked": 1, "failed": 1, "in-flight": 1, "open": 1}, states)
	var label string
	p.eval(`document.querySelector('#grid .cell[data-state="parked"]').getAttribute("aria-label")`, &label)
	require.Equal(t, "Sun 29 March 2026: 23 slots: 22 complete, 1 parked", label)
	// Double-click zooms in to the day's slots, zoom out back to days.
	p.drawn(chromedp.DoubleClick(chromedp.CSS(`#grid .cell[data-state="parked"]`)))
	require.Equal(t, 23, p.count(`#grid .cell`))
	require.Equal(t, 1, p.count(`#grid .row`))
	p.drawn(chromedp.Click(chromedp.ID("zoom-out")))
	require.Equal(t, 6, p.count(`#grid .cell`), "March 26 to 31, the part of March the series has")

	// A failure leads to its history.
	require.Contains(t, p.text("#failures"), parkMessage)
	p.drawn(chromedp.Click(chromedp.CSS(`#failures-rows tr:has(.s-parked) a.history-link`)))
	require.Equal(t, "parked", p.text("#history-state"))
	require.Contains(t, p.text(`#history-rows tr[data-event="parked"]`), parkMessage)
	// The picture for the docs: the whole series, the parked slot selected
	// and its history open.
	slot := strings.ReplaceAll(slot.FormatTime(f.at(29, 10)), "+", "%2B")
	p.drawn(chromedp.Navigate(srv.URL + "/" + f.hash(time.Time{}, time.Time{}) + "&slot=" + slot))
	p.do(chromedp.Click(chromedp.CSS(`#grid .cell[data-state="parked"]`)))
	require.Equal(t, "Sun 2026-03-29 10:00 CEST", p.text("#sel-range"))
	p.screenshot("coverage-page.png")

	// An operator logs in with her token and re-opens six completed hours
	// of the 28th.
	p.do(chromedp.Navigate(srv.URL+"/login"), chromedp.SendKeys(chromedp.ID("token"), aliceToken))
	p.do(chromedp.Click(chromedp.ID("login-submit")), chromedp.WaitVisible(chromedp.CSS(".badge.on")))
	require.Equal(t, "Actions enabled · alice@example", p.text(".badge.on"))
	p.drawn(chromedp.Navigate(srv.URL + "/" + f.hash(f.day(28), f.day(29))))
	states = p.states()
	require.Equal(t, map[string]int{"complete": 24}, states)
	nodes, err := chromedp.Run(p.ctx, chromedp.Nodes(chromedp.CSSAll(`#grid .cell`)))
	require.NoError(t, err)
	p.do(chromedp.MouseClickNode(nodes[6]), chromedp.MouseClickNode(nodes[11], chromedp.ButtonModifiers(chromedp.ModifierShift)))
	require.Equal(t, "6", p.text(`#sel-counts [data-k="slots"] dd`))
	p.do(chromedp.Click(chromedp.CSS(`#sel-buttons [data-action="reopen"]`)), chromedp.WaitVisible(chromedp.ID("action-reason")),
		chromedp.SendKeys(chromedp.ID("action-reason"), "late orders from the Hamburg shop"))
	p.screenshot("coverage-actions.png")
	p.do(chromedp.Click(chromedp.ID("action-confirm")),
		chromedp.Poll[chromedp.Void](`document.getElementById("status").textContent.includes("re-opened 6 slots")`))
	p.do(chromedp.Poll[chromedp.Void](`document.querySelectorAll('#grid .cell[data-state="open"]').length === 6`))
	states = p.states()
	require.Equal(t, map[string]int{"complete": 18, "open": 6}, states)
	require.Equal(t, fmt.Sprint(seedOpen+6), p.text(row+`td[data-k="open"]`))
	h, err := f.client.History(context.Background(), f.series, f.at(28, 6))
	require.NoError(t, err)
	require.Equal(t, "alice@example", h.Events[len(h.Events)-1].Actor)
}
