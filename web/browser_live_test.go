package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

// answers counts a handler's answers by path and status.
type answers struct {
	mu sync.Mutex
	n  map[string]int // "path status"
}

func (a *answers) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.n[fmt.Sprintf("%s %d", r.URL.Path, rec.code)]++
	})
}

func (a *answers) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[key]
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// waitFor polls a JavaScript condition for at most ten seconds.
func (p page) waitFor(js string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	require.NoError(p.t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](js)), "waiting for %s", js)
}

// refreshes returns how many times the page checked for changes.
func (p page) refreshes() int {
	var n int
	p.eval(`Number(document.body.dataset.refreshes || 0)`, &n)
	return n
}

// TestBrowserLive checks that the page follows the database without a
// reload: while nothing changes its checks are answered 304 and its "as
// of" time moves on; a re-open made elsewhere shows in the calendar and
// the series table, and the selected cell stays selected.
func TestBrowserLive(t *testing.T) {
	f := seed(t)
	seen := &answers{n: map[string]int{}}
	srv := serve(t, seen.wrap(web.Handler(f.client, web.Options{CacheTTL: -1, Refresh: 100 * time.Millisecond})))
	p := page{t, browser(t)}
	p.navigated(srv.URL + "/" + f.hash(f.day(28), f.day(29)))
	require.Equal(t, map[string]int{"complete": 24}, p.states())
	require.False(t, p.visible("#choose"), "the hint to choose a series stays once one is chosen")
	asOf := p.text("#asof")
	require.Regexp(t, `^Counts as of \d\d:\d\d:\d\d CET · checked every 1 s$`, asOf)
	nodes, err := chromedp.Run(p.ctx, chromedp.Nodes(chromedp.CSSAll(`#grid .cell`)))
	require.NoError(t, err)
	p.do(chromedp.MouseClickNode(nodes[8]))

	// Unchanged: 304s, and the time moves on.
	p.waitFor(fmt.Sprintf(`Number(document.body.dataset.refreshes || 0) >= %d`, p.refreshes()+3))
	require.Equal(t, 1, seen.count("/api/heatmap 200"), "the unchanged calendar was sent again")
	require.Positive(t, seen.count("/api/heatmap 304"))
	require.Positive(t, seen.count("/api/failures 304"))
	require.Positive(t, seen.count("/api/series 304"))
	p.waitFor(`document.getElementById("asof").textContent !== ` + fmt.Sprintf("%q", asOf))

	// Six hours re-opened by someone else.
	loads := p.loads()
	_, err = f.client.Reopen(context.Background(), f.series, f.at(28, 6), f.at(28, 12), almanac.WriteOptions{Reason: "late orders"})
	require.NoError(t, err)
	p.waitFor(`document.querySelectorAll('#grid .cell[data-state="open"]').length === 6`)
	p.waitFor(`document.querySelector('#series tbody td[data-k="open"]').textContent === "` + fmt.Sprint(seedOpen+6) + `"`)
	require.Equal(t, loads, p.loads(), "the page reloaded")
	var pressed []string
	p.eval(`[...document.querySelectorAll('#grid .cell[aria-pressed="true"]')].map(c => c.textContent)`, &pressed)
	require.Equal(t, []string{"08"}, pressed, "the selection moved or was lost")
	require.Equal(t, "6", p.text(`#totals [data-k="open"] dd`))
}

// visible reports whether sel is rendered.
func (p page) visible(sel string) bool {
	p.t.Helper()
	var v bool
	p.eval(`(() => { const e = document.querySelector(`+fmt.Sprintf("%q", sel)+`); return !!e && e.getClientRects().length > 0; })()`, &v)
	return v
}

// active returns the label of the focused element.
func (p page) active() string {
	p.t.Helper()
	var s string
	p.eval(`document.activeElement.getAttribute("aria-label") || document.activeElement.textContent`, &s)
	return s
}

// pressed returns the labels of the selected cells.
func (p page) pressed() []string {
	p.t.Helper()
	var s []string
	p.eval(`[...document.querySelectorAll('#grid .cell[aria-pressed="true"]')].map(c => c.getAttribute("aria-label").split(": ")[0])`, &s)
	return s
}

// TestBrowserKeyboard follows a link to a slot (its cell is highlighted
// and selected) and works the calendar from the keyboard: arrows move the
// selection, shift extends it, Enter opens a slot's history or zooms into
// a day, Escape closes the history, then the selection.
func TestBrowserKeyboard(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{})
	p := page{t, browser(t)}
	slotParam := strings.ReplaceAll(slot.FormatTime(f.at(29, 10)), "+", "%2B")
	p.navigated(srv.URL + "/" + f.hash(time.Time{}, time.Time{}) + "&slot=" + slotParam)
	require.Equal(t, 1, p.count(`#grid .cell.linked`))
	var linked string
	p.eval(`document.querySelector("#grid .cell.linked").getAttribute("aria-label")`, &linked)
	require.True(t, strings.HasPrefix(linked, "Sun 2026-03-29 10:00 CEST:"), linked)
	var ring struct{ Outline, Style string }
	p.eval(`(() => { const s = getComputedStyle(document.querySelector("#grid .cell.linked")); return {outline: s.outlineWidth, style: s.outlineStyle}; })()`, &ring)
	require.Equal(t, "dashed", ring.Style, "the linked cell is not marked")
	require.Equal(t, []string{"Sun 2026-03-29 10:00 CEST"}, p.pressed(), "the linked cell is not selected")
	require.True(t, p.visible("#history"))

	// Tab reaches the calendar at the selected cell (the zoom buttons are
	// disabled at the whole series).
	p.do(chromedp.Focus(chromedp.CSS(`#series tbody th a`)), chromedp.KeyEvent(kb.Tab))
	for range 2 {
		if strings.HasPrefix(p.active(), "Sun 2026-03-29 10:00") {
			break
		}
		p.do(chromedp.KeyEvent(kb.Tab))
	}
	require.True(t, strings.HasPrefix(p.active(), "Sun 2026-03-29 10:00 CEST"), "Tab lands on %q", p.active())
	p.do(chromedp.KeyEvent(kb.ArrowRight))
	require.Equal(t, []string{"Sun 2026-03-29 11:00 CEST"}, p.pressed())
	// Up and down keep the column: the eleventh cell of the 29th, which
	// has no 02:00, is 11:00, of the other days 10:00.
	p.do(chromedp.KeyEvent(kb.ArrowDown))
	require.Equal(t, []string{"Mon 2026-03-30 10:00 CEST"}, p.pressed())
	p.do(chromedp.KeyEvent(kb.ArrowUp), chromedp.KeyEvent(kb.ArrowUp))
	require.Equal(t, []string{"Sat 2026-03-28 10:00 CET"}, p.pressed())
	p.do(chromedp.KeyEvent(kb.ArrowLeft), chromedp.KeyEvent(kb.ArrowRight, chromedp.KeyModifiers(chromedp.ModifierShift)),
		chromedp.KeyEvent(kb.ArrowRight, chromedp.KeyModifiers(chromedp.ModifierShift)))
	require.Equal(t, []string{"Sat 2026-03-28 09:00 CET", "Sat 2026-03-28 10:00 CET", "Sat 2026-03-28 11:00 CET"}, p.pressed())
	require.Equal(t, "3", p.text(`#sel-counts [data-k="slots"] dd`))
	require.True(t, strings.HasPrefix(p.active(), "Sat 2026-03-28 11:00 CET"), p.active())

	// Enter opens the focused slot's history; Escape closes it, then the
	// selection.
	p.drawn(enter)
	require.Contains(t, p.text("#history-h"), "2026-03-28 11:00 CET")
	require.True(t, strings.HasPrefix(p.active(), "Sat 2026-03-28 11:00 CET"), "the focus left the calendar: %q", p.active())
	p.drawn(chromedp.KeyEvent(kb.Escape))
	require.False(t, p.visible("#history"))
	require.NotContains(t, p.eval2(`location.hash`), "slot=")
	require.Len(t, p.pressed(), 3, "closing the history keeps the selection")
	p.do(chromedp.KeyEvent(kb.Escape))
	require.Empty(t, p.pressed())

	// In a calendar of days, Enter zooms into the focused day.
	p.drawn(chromedp.Navigate(srv.URL + "/" + f.hash(time.Time{}, time.Time{}) + "&buckets=60"))
	p.do(chromedp.Focus(chromedp.CSS(`#grid .cell[data-i="0"]`)), chromedp.KeyEvent(kb.End))
	require.Equal(t, []string{"Tue 31 March 2026"}, p.pressed())
	p.do(chromedp.KeyEvent(kb.Home), chromedp.KeyEvent(kb.ArrowRight))
	require.Equal(t, []string{"Fri 27 March 2026"}, p.pressed())
	p.drawn(enter)
	require.Equal(t, 24, p.count(`#grid .cell`))
	require.Equal(t, "Fri 2026-03-27", p.text(`#grid .row-label`))
}

// enter presses Enter as a keyboard does: one key-down event that carries
// the text, so that a handler that prevents the key-down's default also
// prevents the keypress (chromedp.KeyEvent sends the keypress apart, and a
// button then also gets a click).
func enter(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
		ev := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
		if typ == input.DispatchKeyEventTypeKeyDown {
			ev.Text, ev.UnmodifiedText = "\r", "\r"
		}
		if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, ev); err != nil {
			return chromedp.Void{}, err
		}
	}
	return chromedp.Void{}, nil
}

// eval2 returns the string value of js.
func (p page) eval2(js string) string {
	p.t.Helper()
	var s string
	p.eval(js, &s)
	return s
}

// TestBrowserOverdue checks the hint on a failed slot whose next try
// passed and the banner when no worker has been seen since.
func TestBrowserOverdue(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{CacheTTL: -1})
	p := page{t, browser(t)}
	f.exec(`UPDATE {{schema}}.slot SET not_before = now() - interval '10 minutes' WHERE slot_start = $1`, f.at(30, 6))
	p.navigated(srv.URL + "/" + f.hash(time.Time{}, time.Time{}))
	slotParam := strings.ReplaceAll(slot.FormatTime(f.at(30, 6)), "+", "%2B")
	row := `#failures-rows tr:has(a[data-slot="` + slot.FormatTime(f.at(30, 6)) + `"])`
	require.Contains(t, p.text(row+` td.next`), "overdue: no worker has taken it")
	require.NotContains(t, p.text(`#failures-rows tr:has(a[data-slot="`+slot.FormatTime(f.at(30, 7))+`"]) td.next`), "overdue")
	require.False(t, p.visible("#stalled"), "workers failed and completed slots just now")

	// Every trace of a worker is an hour old.
	f.exec(`UPDATE {{schema}}.slot SET updated_at = now() - interval '1 hour' WHERE fail_count > 0`)
	f.exec(`UPDATE {{schema}}.slot SET completed_at = now() - interval '1 hour' WHERE status = 'COMPLETE'`)
	p.drawn(chromedp.Navigate(srv.URL + "/" + f.hash(time.Time{}, time.Time{}) + "&slot=" + slotParam))
	require.True(t, p.visible("#stalled"))
	banner := p.text("#stalled")
	require.Contains(t, banner, "No worker seems to be running for orders.")
	require.Contains(t, banner, "1 failed slot is overdue")
	require.Contains(t, p.text(row+` td.next`), "overdue: no worker has taken it")
}

// contrastJS lists the visible texts of the page whose contrast with what
// is behind them is below WCAG AA (4.5, or 3 for large text), walking up
// to the first opaque background; texts on a gradient (the hatch of
// missing cells) and disabled controls are left out.
const contrastJS = `(() => {
	const rgba = (s) => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null; const v = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
	const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
	const over = (top, under) => { const a = top[3]; return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat(1); };
	const behind = (e) => {
		const layers = [];
		for (let n = e; n; n = n.parentElement) {
			const s = getComputedStyle(n);
			if (s.backgroundImage !== "none") return null;
			const c = rgba(s.backgroundColor);
			if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
		}
		let bg = [255, 255, 255, 1];
		for (const c of layers.reverse()) bg = over(c, bg);
		return bg;
	};
	const out = [];
	const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let t = walker.nextNode(); t; t = walker.nextNode()) {
		if (!t.textContent.trim()) continue;
		const e = t.parentElement;
		if (!e.getClientRects().length || e.closest(":disabled, [hidden], dialog:not([open])")) continue;
		const s = getComputedStyle(e);
		if (s.visibility !== "visible" || Number(s.opacity) === 0) continue;
		const bg = behind(e);
		if (!bg) continue;
		const fg = over(rgba(s.color), bg);
		const l1 = lum(fg), l2 = lum(bg);
		const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
		const size = parseFloat(s.fontSize), bold = Number(s.fontWeight) >= 700;
		const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
		if (ratio < need) out.push(t.textContent.trim().slice(0, 40) + " (" + e.tagName.toLowerCase() + "." + e.className + "): " + ratio.toFixed(2));
	}
	return out;
})()`

// TestBrowserThemes checks that the page follows the system's color scheme
// and that every text on it meets WCAG AA contrast in both: the series
// table, a calendar with failures, overdue slots and a selection, a slot's
// history, the banner and the actions' panel; the login page.
func TestBrowserThemes(t *testing.T) {
	f := seed(t)
	f.exec(`UPDATE {{schema}}.slot SET not_before = now() - interval '10 minutes' WHERE fail_count > 0 AND not_before <> 'infinity'`)
	f.exec(`UPDATE {{schema}}.slot SET updated_at = now() - interval '1 hour' WHERE fail_count > 0`)
	f.exec(`UPDATE {{schema}}.slot SET completed_at = now() - interval '1 hour' WHERE status = 'COMPLETE'`)
	srv := f.serve(t, web.Options{AllowActions: true, Token: testToken})
	p := page{t, browser(t)}
	slotParam := strings.ReplaceAll(slot.FormatTime(f.at(29, 10)), "+", "%2B")
	for _, scheme := range []struct{ name, bg string }{{"light", "rgb(255, 255, 255)"}, {"dark", "rgb(13, 17, 23)"}} {
		p.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme.name}}})
			return err
		}))
		p.navigated(srv.URL + "/" + f.hash(time.Time{}, time.Time{}) + "&slot=" + slotParam)
		require.Equal(t, scheme.bg, p.eval2(`getComputedStyle(document.body).backgroundColor`), scheme.name)
		require.True(t, p.visible("#stalled"), scheme.name)
		var low []string
		p.eval(contrastJS, &low)
		require.Empty(t, low, "%s: texts below WCAG AA contrast", scheme.name)
		if scheme.name == "dark" {
			p.screenshot("coverage-page-dark.png")
		}
		p.do(chromedp.Navigate(srv.URL+"/login"), chromedp.WaitVisible(chromedp.ID("token")))
		p.eval(contrastJS, &low)
		require.Empty(t, low, "%s: texts of the login page below WCAG AA contrast", scheme.name)
	}
}
