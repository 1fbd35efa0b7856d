package almanac

import (
	"context"
	"fmt"
	"time"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/slot"
)

// SeriesOptions place a series' grid and set the controls stored with it,
// which every process working on the series obeys. The zero value is UTC
// with the default origin and no controls.
type SeriesOptions struct {
	// TimeZone is an IANA zone name; calendar parts (days, months) are
	// added in it. Default "UTC".
	TimeZone string
	// Origin is the start of slot 0. Default 2000-01-01T00:00 local (Monday
	// 2000-01-03 for weekly intervals).
	Origin time.Time
	// Lag is how long after its end a slot of the series becomes due, on
	// the database clock: no worker claims it earlier (a job's Policy.Lag
	// applies when it is longer), and coverage reports count a slot without
	// a row that is not due yet as not due, never as missing. Whole
	// microseconds; 0 (the default) stores none. Negative is refused.
	Lag time.Duration
	// MaxInFlight caps how many slots of the series are held at once, by
	// every process and mode together: a claim that would exceed it takes
	// fewer slots or none, enforced in the database without
	// over-admission under races, crashes and takeovers. A claim then
	// costs more (one lock of the series row per claim, and a permit per
	// locked-mode slot). 0 (the default) means no cap; negative is
	// refused. Slots claimed before a cap was set count toward it and
	// finish.
	MaxInFlight int
	// After lists the upstream series, registered, of any interval and
	// zone: a slot of this series is due only once every upstream slot
	// overlapping it in time is COMPLETE or SKIP (a part of its span
	// without an upstream row is not done), and its lag passed.
	// Re-opening an upstream slot re-opens the overlapping finished slots
	// of this series as a new generation, in the same transaction, by
	// every path (the API, the Tx variants, the CLI, the page, plain SQL),
	// and on down the graph. A dependency that would close a cycle is
	// refused (ErrInvalid, naming the cycle). Default none.
	After []Series
}

// SeriesInfo is a registered series: its grid, its policies and when it
// was registered.
type SeriesInfo struct {
	Series Series
	// MaxAttempts parks a slot after this many failures; 0 means no limit.
	MaxAttempts int
	// Lag is the series' stored lag (SeriesOptions.Lag), 0 if none.
	Lag time.Duration
	// MaxInFlight is the series' cap (SeriesOptions.MaxInFlight), 0 if
	// none.
	MaxInFlight int
	// PausedAt is when the series was paused (Client.Pause; database
	// clock), zero when it is not paused; PausedBy and PausedReason say who
	// paused it and why.
	PausedAt               time.Time
	PausedBy, PausedReason string
	// After lists the series this one depends on (SeriesOptions.After),
	// ordered by name and interval; the series that depend on it are
	// those whose After names it (ListSeries). LookupSeries, ListSeries
	// and SetSeries fill it; the other calls leave it nil.
	After []Series
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
// The controls opts sets (non-zero) are stored, replacing the stored ones;
// zero ones leave what is stored (SetSeries clears them). Errors wrap
// ErrInvalid for malformed input and ErrSeriesConflict for a series
// registered with another zone or origin.
func (c *Client) Series(ctx context.Context, name, interval string, opts SeriesOptions) (Series, error) {
	grid, err := newSeries(name, interval, opts)
	if err != nil {
		return Series{}, err
	}
	if err := checkControls(opts); err != nil {
		return Series{}, err
	}
	info, _, err := c.AddSeries(ctx, grid)
	if err != nil {
		return info.Series, err
	}
	if len(opts.After) > 0 {
		if err := seriesdb.SetAfter(c.call(ctx), c.pool, c.opts.Schema, grid.Name(), grid.Interval(), opts.After); err != nil {
			return info.Series, err
		}
	}
	if set := changedControls(opts); set != (seriesdb.Settings{}) {
		def, err := seriesdb.Set(c.call(ctx), c.pool, c.opts.Schema, grid.Name(), grid.Interval(), set)
		return def.Grid, err
	}
	return info.Series, nil
}

// SetSeries replaces the controls of the registered series s with those of
// opts (Lag, MaxInFlight, After; a zero value clears one) and returns the
// series as stored then; opts.TimeZone and opts.Origin are ignored (a grid
// never changes). A cycle of dependencies is refused before anything is
// changed.
// Processes obey the new values from their next claim. Errors wrap
// ErrInvalid for a negative value and ErrUnknownSeries for a series not
// registered.
func (c *Client) SetSeries(ctx context.Context, s Series, opts SeriesOptions) (SeriesInfo, error) {
	if err := checkControls(opts); err != nil {
		return SeriesInfo{}, err
	}
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return SeriesInfo{}, err
	}
	if err := seriesdb.SetAfter(ctx, c.pool, c.opts.Schema, s.Name(), s.Interval(), opts.After); err != nil {
		return SeriesInfo{}, err
	}
	def, err := seriesdb.Set(ctx, c.pool, c.opts.Schema, s.Name(), s.Interval(), seriesdb.Settings{Lag: &opts.Lag, MaxInFlight: &opts.MaxInFlight})
	if err != nil {
		return seriesInfo(def), err
	}
	return c.withAfter(ctx, seriesInfo(def))
}

// Pause pauses the registered series s for every process: from the
// commit on, no process claims its slots (taking over expired leases
// included); slots held when it is paused finish and record their
// outcomes. reason (optional, at most 1 KiB of printable UTF-8) and the
// client's actor (Options.Actor, else the database role) are stored on the
// series and in its history (series_event). Pausing a paused series keeps
// the time it was first paused; it is recorded again only with another
// actor or reason. Errors wrap ErrInvalid for a bad reason and
// ErrUnknownSeries for a series not registered.
func (c *Client) Pause(ctx context.Context, s Series, reason string) (SeriesInfo, error) {
	return c.pause(ctx, s, true, reason)
}

// Resume ends a pause (see Pause) and wakes the series' idle workers; a
// series not paused stays as it is, and nothing is recorded. The resume is
// recorded in the series' history with reason. Errors as for Pause.
func (c *Client) Resume(ctx context.Context, s Series, reason string) (SeriesInfo, error) {
	return c.pause(ctx, s, false, reason)
}

func (c *Client) pause(ctx context.Context, s Series, pause bool, reason string) (SeriesInfo, error) {
	if err := checkReason(reason); err != nil {
		return SeriesInfo{}, err
	}
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return SeriesInfo{}, err
	}
	def, err := seriesdb.Pause(ctx, c.pool, c.opts.Schema, s.Name(), s.Interval(), pause, c.opts.Actor, reason)
	if err == nil {
		op := "almanac: series paused"
		if !pause {
			op = "almanac: series resumed"
		}
		actor := c.opts.Actor
		if actor == "" {
			actor = "(database role)"
		}
		c.opts.Logger.InfoContext(ctx, op, "series", s.Name(), "interval", s.Interval().String(), "actor", actor, "reason", reason)
	}
	return seriesInfo(def), err
}

// checkControls refuses controls that cannot be stored.
func checkControls(opts SeriesOptions) error {
	if opts.Lag < 0 {
		return fmt.Errorf("%w: lag %s is negative; expected 0 or more", ErrInvalid, opts.Lag)
	}
	if opts.MaxInFlight < 0 {
		return fmt.Errorf("%w: max in flight %d is negative; expected 0 (no cap) or more", ErrInvalid, opts.MaxInFlight)
	}
	return nil
}

// changedControls are the non-zero controls of opts, for Series.
func changedControls(opts SeriesOptions) seriesdb.Settings {
	var set seriesdb.Settings
	if opts.Lag != 0 {
		set.Lag = &opts.Lag
	}
	if opts.MaxInFlight != 0 {
		set.MaxInFlight = &opts.MaxInFlight
	}
	return set
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
	if err != nil {
		return seriesInfo(def), err
	}
	return c.withAfter(ctx, seriesInfo(def))
}

// withAfter fills info.After from the stored dependencies.
func (c *Client) withAfter(ctx context.Context, info SeriesInfo) (SeriesInfo, error) {
	ups, err := seriesdb.After(ctx, c.pool, c.opts.Schema, info.Series.Name(), info.Series.Interval())
	for _, u := range ups {
		info.After = append(info.After, u.Grid)
	}
	return info, err
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
	if err != nil {
		return nil, err
	}
	edges, err := seriesdb.Edges(ctx, c.pool, c.opts.Schema)
	if err != nil {
		return nil, err
	}
	grids := make(map[[2]string]Series, len(defs))
	for _, d := range defs {
		if d.Err == nil {
			grids[[2]string{d.Grid.Name(), d.Grid.Interval().String()}] = d.Grid
		}
	}
	out := make([]SeriesInfo, len(defs))
	for i, d := range defs {
		out[i] = seriesInfo(d)
		if d.Err != nil {
			continue
		}
		for _, up := range edges[[2]string{d.Grid.Name(), d.Grid.Interval().String()}] {
			if g, ok := grids[up]; ok {
				out[i].After = append(out[i].After, g)
			}
		}
	}
	return out, nil
}

func seriesInfo(d seriesdb.Definition) SeriesInfo {
	return SeriesInfo{Series: d.Grid, MaxAttempts: d.MaxAttempts, Lag: d.Lag, MaxInFlight: d.MaxInFlight, PausedAt: d.PausedAt, PausedBy: d.PausedBy,
		PausedReason: d.PausedReason, CreatedAt: d.CreatedAt, Err: d.Err}
}
