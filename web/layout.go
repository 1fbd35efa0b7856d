package web

import (
	"fmt"
	"strconv"
	"time"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
)

// The states a cell is drawn in, most urgent first: a cell takes the color
// of the most urgent state among its slots, so one parked slot in a year of
// completed ones still shows at the top level.
// Slots not due yet come last: the future is not a problem.
var urgency = []string{"parked", "failed", "missing", "in-flight", "open", "skipped", "complete", "not-due"}

// counts are a cell's slots by state, as the page's script reads them.
type counts struct {
	Slots    int64 `json:"slots"`
	Complete int64 `json:"complete"`
	Skipped  int64 `json:"skipped"`
	Open     int64 `json:"open"`
	InFlight int64 `json:"inFlight"`
	Failed   int64 `json:"failed"`
	Parked   int64 `json:"parked"`
	Missing  int64 `json:"missing"`
	NotDue   int64 `json:"notDue"`
}

func countsOf(b almanac.HeatmapBucket) counts {
	return counts{Slots: b.Slots, Complete: b.Complete, Skipped: b.Skipped, Open: b.Open,
		InFlight: b.InFlight, Failed: b.Failed, Parked: b.Parked, Missing: b.Missing, NotDue: b.NotDue}
}

// state returns the most urgent state present, "none" for a cell without
// slots.
func (c counts) state() string {
	for i, n := range []int64{c.Parked, c.Failed, c.Missing, c.InFlight, c.Open, c.Skipped, c.Complete, c.NotDue} {
		if n > 0 {
			return urgency[i]
		}
	}
	return "none"
}

// covered is the share of slots finished, in percent (100 without slots).
func (c counts) covered() float64 {
	if c.Slots == 0 {
		return 100
	}
	return float64(c.Complete+c.Skipped) * 100 / float64(c.Slots)
}

// formatPct prints a share without claiming 100 % while anything is left.
func formatPct(p float64) string {
	if p < 100 && p > 99.9 {
		return "99.9 %"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + " %"
}

// cell is one bucket of the calendar.
type cell struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Short string `json:"short"` // what fits in the cell: "03", "29", "Mar"
	Label string `json:"label"` // the bucket in words, for titles and screen readers
	State string `json:"state"`
	counts
}

// row is one line of the calendar: the cells of one coarser unit (the hours
// of a day, the days of a month).
type row struct {
	Label string `json:"label"`
	From  string `json:"from"`
	To    string `json:"to"`
	Cells []cell `json:"cells"`
}

// rowUnit is the unit that groups cells of unit into rows, for a series of
// interval iv.
func rowUnit(unit string, iv slot.Interval) string {
	switch unit {
	case "slot":
		switch {
		case iv.Months() > 0 || iv.Days() >= 28:
			return "year"
		case iv.Days() > 0 || iv.Clock() >= 24*time.Hour:
			return "month"
		case iv.Clock() >= 30*time.Minute:
			return "day"
		case iv.Clock() >= time.Minute:
			return "hour"
		default:
			return "minute"
		}
	case "minute":
		return "hour"
	case "hour":
		return "day"
	case "day":
		return "month"
	case "month":
		return "year"
	default:
		return "all"
	}
}

// rowLabel names the row of unit holding t; the zone's abbreviation keeps
// the two hours of a night when clocks go back apart, and a day that is
// not 24 hours long says so.
func rowLabel(unit string, t time.Time) string {
	switch unit {
	case "minute":
		return t.Format("Mon 2006-01-02 15:04 MST")
	case "hour":
		return t.Format("Mon 2006-01-02 15:00 MST")
	case "day":
		y, m, d := t.Date()
		lo := time.Date(y, m, d, 0, 0, 0, 0, t.Location())
		hours := time.Date(y, m, d+1, 0, 0, 0, 0, t.Location()).Sub(lo)
		label := t.Format("Mon 2006-01-02")
		if hours != 24*time.Hour {
			label += fmt.Sprintf(" (%s h)", strconv.FormatFloat(hours.Hours(), 'f', -1, 64))
		}
		return label
	case "month":
		return t.Format("January 2006")
	case "year":
		return t.Format("2006")
	default:
		return "All years"
	}
}

// cellText returns a cell's short text and its label in words.
func cellText(unit string, step int, b almanac.HeatmapBucket, iv slot.Interval) (string, string) {
	t := b.Start
	switch unit {
	case "slot":
		label := b.Start.Format("Mon 2006-01-02 15:04 MST")
		if b.Start.Second() != 0 {
			label = b.Start.Format("Mon 2006-01-02 15:04:05 MST")
		}
		switch {
		case iv.Months() > 0:
			return t.Format("Jan"), label
		case iv.Days() > 0 || iv.Clock() >= 24*time.Hour:
			return t.Format("02"), label
		case iv.Clock() >= time.Hour:
			return t.Format("15"), label
		case iv.Clock() >= time.Minute:
			return t.Format("04"), label
		default:
			return t.Format("05"), label
		}
	case "minute":
		return t.Format("04"), t.Format("2006-01-02 15:04 MST")
	case "hour":
		return t.Format("15"), t.Format("2006-01-02 15:00 MST")
	case "day":
		return t.Format("02"), t.Format("Mon 2 January 2006")
	case "month":
		return t.Format("Jan"), t.Format("January 2006")
	default:
		if step > 1 {
			return t.Format("2006"), fmt.Sprintf("%s to %s", t.Format("2006"), b.End.Add(-time.Nanosecond).Format("2006"))
		}
		return t.Format("2006"), t.Format("2006")
	}
}

// layout groups a heatmap's buckets into rows.
func layout(h almanac.Heatmap, iv slot.Interval) []row {
	ru := rowUnit(h.Unit, iv)
	var rows []row
	for _, b := range h.Buckets {
		label := rowLabel(ru, b.Start)
		if len(rows) == 0 || rows[len(rows)-1].Label != label {
			rows = append(rows, row{Label: label, From: slot.FormatTime(b.Start)})
		}
		r := &rows[len(rows)-1]
		r.To = slot.FormatTime(b.End)
		short, long := cellText(h.Unit, h.Step, b, iv)
		c := countsOf(b)
		r.Cells = append(r.Cells, cell{From: slot.FormatTime(b.Start), To: slot.FormatTime(b.End),
			Short: short, Label: long, State: c.state(), counts: c})
	}
	return rows
}

// enclosing returns the range one zoom level out from [from, to): the
// day, month or year around it, cut to the series' extent [lo, hi); ok is
// false when [from, to) is the extent already.
func enclosing(from, to, lo, hi time.Time) (time.Time, time.Time, bool) {
	if !from.After(lo) && !to.Before(hi) {
		return lo, hi, false
	}
	y, m, d := from.Date()
	loc := from.Location()
	for _, span := range [][2]time.Time{
		{time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)},
		{time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)},
		{time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)},
	} {
		a, b := later(span[0], lo), earlier(span[1], hi)
		if !a.After(from) && !b.Before(to) && (a.Before(from) || b.After(to)) {
			return a, b, true
		}
	}
	return lo, hi, true
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
