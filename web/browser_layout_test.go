package web_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/web"
)

// onScreen is what the page shows of its calendar and series table, as
// measured in the browser.
type onScreen struct {
	Width, Height int     // the viewport
	Rows          []label // the calendar's rows
	Off           []string
	Narrowest     float64 // the narrowest cell, in pixels
	GridScroll    int     // how far the calendar scrolls sideways
	PageScroll    int     // how far the page scrolls sideways
	TableScroll   int     // how far the series table scrolls sideways
	TableRight    float64 // the right edge of the series table's last column
	Parked        *box    // the first cell with a parked slot
}

type label struct {
	Label string
	Cells []string
}

type box struct{ Left, Right, Top, Bottom float64 }

// measure reads onScreen from the page.
func (p page) measure() onScreen {
	p.t.Helper()
	var m onScreen
	p.eval(`(() => {
		const vw = document.documentElement.clientWidth, vh = document.documentElement.clientHeight;
		const grid = document.getElementById("grid");
		const cells = [...grid.querySelectorAll(".cell")];
		const rect = (e) => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
		const parked = grid.querySelector('.cell[data-state="parked"]');
		const table = document.querySelector("#series");
		const ths = table.querySelectorAll("thead th");
		return {
			width: vw, height: vh,
			rows: [...grid.querySelectorAll(".row")].map(r => ({label: r.querySelector(".row-label").textContent,
				cells: [...r.querySelectorAll(".cell")].map(c => c.textContent)})),
			off: cells.filter(c => { const r = c.getBoundingClientRect(); return r.left < 0 || r.right > vw; }).map(c => c.getAttribute("aria-label")),
			narrowest: Math.min(...cells.map(c => c.getBoundingClientRect().width)),
			gridScroll: grid.scrollWidth - grid.clientWidth,
			pageScroll: document.documentElement.scrollWidth - vw,
			tableScroll: table.parentElement.scrollWidth - table.parentElement.clientWidth,
			tableRight: ths[ths.length - 1].getBoundingClientRect().right,
			parked: parked ? rect(parked) : null,
		};
	})()`, &m)
	return m
}

// TestBrowserWidths opens the page at window widths of 1024, 1400 and 1920
// pixels: every day of a month, and the parked slot's cell, are on screen
// without scrolling sideways (in the calendar or the page), the series
// table's last column too, and an hour of one-minute slots fits as well.
func TestBrowserWidths(t *testing.T) {
	f := seedMonth(t)
	ctx := context.Background()
	ticks, err := f.client.Series(ctx, "ticks", "PT1M", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	at := time.Date(2026, 10, 30, 10, 0, 0, 0, ticks.Location())
	_, err = f.client.Materialize(ctx, ticks, at, at.Add(time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	srv := serve(t, web.Handler(f.client, web.Options{}))
	days := make([]string, 31)
	for i := range days {
		days[i] = fmt.Sprintf("%02d", i+1)
	}
	for _, width := range []int{1024, 1400, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			p := page{t, browserSized(t, width, 900)}
			p.navigated(srv.URL + "/#series=clicks&interval=PT5M")
			m := p.measure()
			require.Equal(t, width, m.Width)
			require.Len(t, m.Rows, 2, "a row per month")
			require.Equal(t, "October 2026", m.Rows[1].Label)
			require.Equal(t, days, m.Rows[1].Cells, "every day of October, in order")
			require.Empty(t, m.Off, "cells outside the viewport")
			require.LessOrEqual(t, m.GridScroll, 0, "the calendar scrolls sideways")
			require.LessOrEqual(t, m.PageScroll, 0, "the page scrolls sideways")
			require.LessOrEqual(t, m.TableScroll, 0, "the series table scrolls sideways")
			require.LessOrEqual(t, m.TableRight, float64(m.Width), "the series table's last column is cut off")
			require.GreaterOrEqual(t, m.Narrowest, 12.0, "cells too narrow to point at")
			require.NotNil(t, m.Parked)
			require.True(t, m.Parked.Left >= 0 && m.Parked.Right <= float64(m.Width) && m.Parked.Top >= 0 && m.Parked.Bottom <= float64(m.Height),
				"the parked slot's cell %+v is off the %dx%d screen", *m.Parked, m.Width, m.Height)
			if width == 1024 {
				p.screenshot("coverage-page-1024.png")
			}

			// Sixty one-minute slots in a row.
			p.drawn(chromedp.Navigate(srv.URL + "/#series=ticks&interval=PT1M"))
			m = p.measure()
			require.Len(t, m.Rows, 1)
			require.Len(t, m.Rows[0].Cells, 60)
			require.Empty(t, m.Off, "cells outside the viewport")
			require.LessOrEqual(t, m.GridScroll, 0, "the calendar scrolls sideways")
			require.LessOrEqual(t, m.PageScroll, 0, "the page scrolls sideways")
			require.GreaterOrEqual(t, m.Narrowest, 12.0, "cells too narrow to point at")
		})
	}
}

// shares counts the pixels of a screenshot of sel by the state color they
// are closest to (within a small distance), as fractions of all.
func (p page) shares(sel string) map[string]float64 {
	p.t.Helper()
	shot, err := chromedp.Run(p.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	require.NoError(p.t, err)
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(p.t, err)
	colors := map[string][3]int{"complete": {0x1a, 0x7f, 0x37}, "skipped": {0xb7, 0xbf, 0xc7}, "failed": {0xbc, 0x4c, 0x00}, "parked": {0xcf, 0x22, 0x2e}}
	n := map[string]float64{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			for name, c := range colors {
				if near(img, x, y, c) {
					n[name]++
				}
			}
		}
	}
	all := float64(b.Dx() * b.Dy())
	for k := range n {
		n[k] /= all
	}
	return n
}

func near(img image.Image, x, y int, c [3]int) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(v uint32, w int) int { return max(int(v>>8)-w, w-int(v>>8)) }
	return d(r, c[0]) < 12 && d(g, c[1]) < 12 && d(b, c[2]) < 12
}

// TestBrowserPartialFill checks that a cell is painted in proportion to its
// slots' states: a day with 12 of 288 slots skipped is mostly green with a
// gray sliver, one failure among 288 is a small orange mark, one parked
// slot a small red one; a day of complete slots is all green.
func TestBrowserPartialFill(t *testing.T) {
	f := seedMonth(t)
	srv := serve(t, web.Handler(f.client, web.Options{}))
	p := page{t, browser(t)}
	p.navigated(srv.URL + "/#series=clicks&interval=PT5M")
	day := func(d int) string {
		return fmt.Sprintf(`#grid .row:nth-child(2) .cell:nth-child(%d)`, d)
	}
	var labels []string
	p.eval(`[12, 20, 30].map(d => document.querySelector("#grid .row:nth-child(2) .cell:nth-child(" + d + ")").getAttribute("aria-label"))`, &labels)
	require.Equal(t, []string{"Mon 12 October 2026: 288 slots: 276 complete, 12 skipped", "Tue 20 October 2026: 288 slots: 287 complete, 1 failed",
		"Fri 30 October 2026: 288 slots: 287 complete, 1 parked"}, labels)

	for _, c := range []struct {
		day   int
		state string
	}{{monthSkipDay, "skipped"}, {monthFailDay, "failed"}, {monthParkDay, "parked"}} {
		n := p.shares(day(c.day))
		t.Logf("day %d: %v", c.day, n)
		require.Greater(t, n[c.state], 0.05, "day %d: the %s slots do not show", c.day, c.state)
		require.Less(t, n[c.state], 0.3, "day %d: a few %s slots paint %.0f %% of the cell", c.day, c.state, 100*n[c.state])
		require.Greater(t, n["complete"], 0.5, "day %d: the complete slots paint %.0f %% of the cell", c.day, 100*n["complete"])
	}
	n := p.shares(day(11))
	require.Greater(t, n["complete"], 0.7, "a complete day is green")
}
