package almanac

import (
	"context"
	"time"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/slot"
)

// SeriesOptions place a series' grid. The zero value is UTC with the
// default origin.
type SeriesOptions struct {
	// TimeZone is an IANA zone name; calendar parts (days, months) are
	// added in it. Default "UTC".
	TimeZone string
	// Origin is the start of slot 0. Default 2000-01-01T00:00 local (Monday
	// 2000-01-03 for weekly intervals).
	Origin time.Time
}

// SeriesInfo is a registered series: its grid, its policies and when it
// was registered.
type SeriesInfo struct {
	Series Series
	// MaxAttempts parks a slot after this many failures; 0 means no limit.
	MaxAttempts int
	// CreatedAt is when the series was registered (database clock).
	CreatedAt time.Time
	// Err is set by ListSeries, and Series is zero, when the stored row
	// cannot be used: plain SQL or another tool stored a name, interval or
	// zone almanac refuses (a control character, P0D, Mars/Olympus). Its
	// text names the row, escaped; nothing can be done with the series
	// until the row is fixed or deleted.
	Err error
}

// Series registers the series (name, interval) with the grid opts describe
// and returns it; a series registered already with the same grid is simply
// returned. interval is an ISO-8601 duration: PT5M, PT1H, P1D, P1W, P1M.
// Errors wrap ErrInvalid for malformed input and ErrSeriesConflict for a
// series registered with another zone or origin.
func (c *Client) Series(ctx context.Context, name, interval string, opts SeriesOptions) (Series, error) {
	grid, err := newSeries(name, interval, opts)
	if err != nil {
		return Series{}, err
	}
	info, _, err := c.AddSeries(ctx, grid)
	return info.Series, err
}

// AddSeries registers the series of grid (from Client.Series, LookupSeries
// or package slot) and says whether
// this call registered it: false when it existed already with the same
// grid, or when the acknowledgment of the registration was lost with its
// connection and it was found registered. A series registered with another
// zone or origin is an error wrapping ErrSeriesConflict.
func (c *Client) AddSeries(ctx context.Context, grid Series) (SeriesInfo, bool, error) {
	if err := input.CheckName(grid.Name()); err != nil {
		return SeriesInfo{}, false, err
	}
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return SeriesInfo{}, false, err
	}
	def, created, err := seriesdb.Add(ctx, c.pool, c.opts.Schema, grid)
	return seriesInfo(def), created, err
}

// newSeries builds the grid of a series without registering it: name,
// interval (ISO-8601) and placement. Errors wrap ErrInvalid.
func newSeries(name, interval string, opts SeriesOptions) (Series, error) {
	if err := input.CheckName(name); err != nil {
		return Series{}, err
	}
	iv, err := slot.ParseInterval(interval)
	if err != nil {
		return Series{}, err
	}
	loc, err := slot.LoadZone(opts.TimeZone)
	if err != nil {
		return Series{}, err
	}
	return slot.NewSeries(name, iv, loc, opts.Origin)
}

// LookupSeries returns the registered series (name, interval), as it was
// registered (its zone and origin). An unregistered series is an error
// wrapping ErrUnknownSeries.
func (c *Client) LookupSeries(ctx context.Context, name, interval string) (SeriesInfo, error) {
	iv, err := slot.ParseInterval(interval)
	if err != nil {
		return SeriesInfo{}, err
	}
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return SeriesInfo{}, err
	}
	def, err := seriesdb.Get(ctx, c.pool, c.opts.Schema, name, iv)
	return seriesInfo(def), err
}

// ListSeries returns every registered series, ordered by name and interval.
// A stored row that cannot be used is listed with Err set (see SeriesInfo),
// so that one bad row does not hide the others: callers skip those.
func (c *Client) ListSeries(ctx context.Context) ([]SeriesInfo, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	defs, err := seriesdb.List(ctx, c.pool, c.opts.Schema)
	out := make([]SeriesInfo, len(defs))
	for i, d := range defs {
		out[i] = seriesInfo(d)
	}
	return out, err
}

func seriesInfo(d seriesdb.Definition) SeriesInfo {
	return SeriesInfo{Series: d.Grid, MaxAttempts: d.MaxAttempts, CreatedAt: d.CreatedAt, Err: d.Err}
}
