// Package seriesdb stores series definitions in the series table. The
// coverage, acquire and scheduler packages and the CLI load a series' grid
// from here, so its zone and origin are decided once, at registration, and
// every instance computes the same slots.
package seriesdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// ErrUnknownSeries is returned when a series is not registered.
var ErrUnknownSeries = errors.New("series not found")

// ErrSeriesConflict is returned by Add when the series exists with another zone or
// origin: changing the grid would move every slot boundary under the rows
// already stored, so it is refused rather than applied.
var ErrSeriesConflict = errors.New("series exists with a different grid")

// Querier is what this package needs from a pool, a connection or a
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Definition is a registered series: its grid, its policies and when it
// was registered.
type Definition struct {
	Grid slot.Series
	// MaxAttempts parks a slot after this many failures; 0 means no limit.
	MaxAttempts int
	// Lag is the series' stored lag (series.lag); 0 when none is stored.
	Lag time.Duration
	// MaxInFlight is the series' cap on slots held at once; 0 for none.
	MaxInFlight int
	// Upstream says whether the series depends on upstream series
	// (series_dependency; After lists them).
	Upstream bool
	// PausedAt is when the series was paused (database clock), zero when
	// it is not; PausedBy and PausedReason say who paused it and why.
	PausedAt               time.Time
	PausedBy, PausedReason string
	CreatedAt              time.Time
	// Err is set by List, and Grid is zero, when the stored row cannot be
	// used: plain SQL or another tool stored a name, interval or zone
	// almanac refuses. Its text names the row, escaped.
	Err error
}

// Add registers the series of grid. Registering the same series again with
// the same zone and origin does nothing and reports created=false; with a
// different zone or origin it returns an error wrapping ErrSeriesConflict. A name
// that fails input.CheckName (a grid may carry one another tool stored) is
// refused before anything is written.
//
// Transient faults are retried (see package retry): registering is
// idempotent. created may then be false for a registration whose
// acknowledgment was lost.
func Add(ctx context.Context, q Querier, schema string, grid slot.Series) (def Definition, created bool, err error) {
	if err := input.CheckName(grid.Name()); err != nil {
		return Definition{}, false, err
	}
	var tag pgconn.CommandTag
	err = retry.Do(ctx, func(ctx context.Context) (err error) {
		tag, err = q.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin)
		VALUES ($1, $2, $3, $4) ON CONFLICT (name, "interval") DO NOTHING`, schema),
			grid.Name(), grid.Interval().String(), grid.Location().String(), grid.Origin())
		return err
	})
	if err != nil {
		return Definition{}, false, err
	}
	def, err = Get(ctx, q, schema, grid.Name(), grid.Interval())
	if err != nil {
		return Definition{}, false, err
	}
	if tag.RowsAffected() == 1 {
		return def, true, nil
	}
	return def, false, sameGrid(def.Grid, grid)
}

const selectColumns = `name, "interval", time_zone, origin, coalesce(max_attempts, 0),
	(extract(epoch FROM coalesce(lag, interval '0')) * 1000000)::bigint,
	coalesce(max_in_flight, 0), paused_at, coalesce(paused_by, ''), coalesce(paused_reason, ''), created_at,
	EXISTS (SELECT FROM {{schema}}.series_dependency AS d WHERE d.name = series.name AND d."interval" = series."interval")`

// Settings are the controls Set changes; a nil field is left as stored.
type Settings struct {
	// Lag is how long after its end a slot becomes due; 0 stores none.
	Lag *time.Duration
	// MaxInFlight caps the slots held at once; 0 stores none.
	MaxInFlight *int
}

// Set changes the stored settings of the series (name, interval) that
// set names, in one statement; an unknown series is an error wrapping
// ErrUnknownSeries, a negative lag one wrapping input.ErrInvalid.
// Transient faults are retried: setting a value is idempotent.
func Set(ctx context.Context, q Querier, schema, name string, interval slot.Interval, set Settings) (Definition, error) {
	var lag *int64
	if set.Lag != nil {
		if *set.Lag < 0 {
			return Definition{}, fmt.Errorf("%w: lag %s is negative; expected 0 or more", input.ErrInvalid, *set.Lag)
		}
		us := set.Lag.Microseconds()
		lag = &us
	}
	if set.MaxInFlight != nil && *set.MaxInFlight < 0 {
		return Definition{}, fmt.Errorf("%w: max in flight %d is negative; expected 0 (no cap) or more", input.ErrInvalid, *set.MaxInFlight)
	}
	var tag pgconn.CommandTag
	err := retry.Do(ctx, func(ctx context.Context) (err error) {
		tag, err = q.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.series SET
		lag = CASE WHEN NOT $3 THEN lag WHEN $4::bigint = 0 THEN NULL ELSE $4::bigint * interval '1 microsecond' END,
		max_in_flight = CASE WHEN NOT $5 THEN max_in_flight ELSE nullif($6::int, 0) END
		WHERE name = $1 AND "interval" = $2`, schema), name, interval.String(), lag != nil, lag, set.MaxInFlight != nil, set.MaxInFlight)
		return err
	})
	if err != nil {
		return Definition{}, err
	}
	if tag.RowsAffected() == 0 {
		return Definition{}, fmt.Errorf("%w: %q with interval %s; register it with `almanac series add`", ErrUnknownSeries, name, interval)
	}
	return Get(ctx, q, schema, name, interval)
}

// pauseSQL pauses ($3) or resumes the series and, on a resume, wakes the
// series' idle workers ($6 the channel, $7 the payload) when the statement
// commits. The series' trigger (series_record, migration 12) records the
// change in series_event: s sets, for the transaction, the actor it
// records ($4; NULL: the session's role) and the reason of a resume ($5),
// which the row does not keep. Pausing a paused series keeps when it was
// first paused, and records who paused it again and why.
const pauseSQL = `WITH s AS (SELECT set_config('almanac.actor', coalesce($4, session_user::text), true),
	set_config('almanac.reason', coalesce($5, ''), true)),
u AS (
	UPDATE {{schema}}.series SET
		paused_at = CASE WHEN $3 THEN coalesce(paused_at, clock_timestamp()) END,
		paused_by = CASE WHEN $3 THEN coalesce($4, session_user) END,
		paused_reason = CASE WHEN $3 THEN $5 END
	WHERE name = $1 AND "interval" = $2 AND (SELECT count(*) FROM s) = 1
	RETURNING name, "interval")
SELECT count(*), (SELECT count(pg_notify($6, $7)) FROM u WHERE NOT $3) FROM u`

// Pause pauses (pause) or resumes the series (name, interval): while it is
// paused no process claims its slots. actor ("" for the session's role)
// and reason are recorded on the row and, by the series' trigger, in
// series_event. An unknown series is an error wrapping ErrUnknownSeries.
// Transient faults are retried: pausing and resuming are idempotent, and a
// retry that changes nothing records nothing.
func Pause(ctx context.Context, q Querier, schema, name string, interval slot.Interval, pause bool, actor, reason string) (Definition, error) {
	var who, why *string
	if actor != "" {
		who = &actor
	}
	if reason != "" {
		why = &reason
	}
	payload, err := json.Marshal(wake.Event{Name: name, Interval: interval.String(), Reason: "resume"})
	if err != nil {
		return Definition{}, err
	}
	var n, woken int64
	err = retry.Do(ctx, func(ctx context.Context) error {
		return q.QueryRow(ctx, sqlschema.Render(pauseSQL, schema), name, interval.String(), pause, who, why,
			wake.Channel(schema), string(payload)).Scan(&n, &woken)
	})
	if err != nil {
		return Definition{}, err
	}
	if n == 0 {
		return Definition{}, fmt.Errorf("%w: %q with interval %s; register it with `almanac series add`", ErrUnknownSeries, name, interval)
	}
	return Get(ctx, q, schema, name, interval)
}

// DueAt reads the database clock less the series' stored lag (0 when none
// is stored): a slot of the series whose end is at or before it is due.
// An unknown series is an error wrapping ErrUnknownSeries. Not retried: q
// may be a transaction.
func DueAt(ctx context.Context, q Querier, schema, name string, interval slot.Interval) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, sqlschema.Render(`SELECT clock_timestamp() - coalesce(lag, interval '0') FROM {{schema}}.series
		WHERE name = $1 AND "interval" = $2`, schema), name, interval.String()).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: %q with interval %s", ErrUnknownSeries, name, interval)
	}
	return at, err
}

// DueFrom returns the start of grid's first slot whose end is after at
// (see DueAt): every slot before it is due.
func DueFrom(grid slot.Series, at time.Time) time.Time {
	sl, err := grid.Floor(at)
	if err != nil {
		return at.In(grid.Location()) // outside the supported years: a bound, not a boundary
	}
	return sl.Start
}

// Get loads the series (name, interval); an unknown series is an error
// wrapping ErrUnknownSeries. Transient faults are retried.
func Get(ctx context.Context, q Querier, schema, name string, interval slot.Interval) (Definition, error) {
	defs, err := query(ctx, q, false, sqlschema.Render(`SELECT `+selectColumns+` FROM {{schema}}.series
		WHERE name = $1 AND "interval" = $2`, schema), name, interval.String())
	if err != nil {
		return Definition{}, err
	}
	if len(defs) == 0 {
		return Definition{}, fmt.Errorf("%w: %q with interval %s; register it with `almanac series add`", ErrUnknownSeries, name, interval)
	}
	return defs[0], nil
}

// List returns every registered series ordered by name and interval. A
// row that cannot be used is listed with Err set, so that one bad row does
// not hide the others. Transient faults are retried.
func List(ctx context.Context, q Querier, schema string) ([]Definition, error) {
	return query(ctx, q, true, sqlschema.Render(`SELECT `+selectColumns+` FROM {{schema}}.series ORDER BY name, "interval"`, schema))
}

// query reads series definitions, repeating the read after transient
// faults. An unusable row is an error, or with tolerant a Definition with
// Err set.
func query(ctx context.Context, q Querier, tolerant bool, sql string, args ...any) ([]Definition, error) {
	var defs []Definition
	err := retry.Do(ctx, func(ctx context.Context) error {
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defs, err = collect(rows, tolerant)
		return err
	})
	return defs, err
}

func collect(rows pgx.Rows, tolerant bool) ([]Definition, error) {
	var out []Definition
	var name, intervalText, zoneName string
	var origin, created time.Time
	var maxAttempts int
	var lagMicros int64
	var maxInFlight int
	var pausedAt *time.Time
	var pausedBy, pausedReason string
	var upstream bool
	_, err := pgx.ForEachRow(rows, []any{&name, &intervalText, &zoneName, &origin, &maxAttempts, &lagMicros, &maxInFlight,
		&pausedAt, &pausedBy, &pausedReason, &created, &upstream}, func() error {
		grid, err := Parse(name, intervalText, zoneName, origin)
		if err != nil && tolerant {
			out = append(out, Definition{MaxAttempts: maxAttempts, CreatedAt: created, Err: err})
			return nil
		}
		if err != nil {
			return err
		}
		d := Definition{Grid: grid, MaxAttempts: maxAttempts, Lag: time.Duration(lagMicros) * time.Microsecond, MaxInFlight: maxInFlight,
			Upstream: upstream, PausedBy: pausedBy, PausedReason: pausedReason, CreatedAt: created}
		if pausedAt != nil {
			d.PausedAt = *pausedAt
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// Parse rebuilds a grid from a stored row. A row another tool wrote badly is
// reported with the series it belongs to.
func Parse(name, intervalText, zoneName string, origin time.Time) (slot.Series, error) {
	iv, err := slot.ParseInterval(intervalText)
	if err == nil && iv.String() != intervalText {
		err = fmt.Errorf("interval %q is not in canonical form %s", intervalText, iv)
	}
	var loc *time.Location
	if err == nil {
		loc, err = slot.LoadZone(zoneName)
	}
	var grid slot.Series
	if err == nil {
		grid, err = slot.NewSeries(name, iv, loc, origin)
	}
	if err != nil {
		return slot.Series{}, fmt.Errorf("stored series %q %q is unusable: %w", name, intervalText, err)
	}
	return grid, nil
}

// noTimeouts begins a transaction without the role's statement and lock
// timeouts, in the same round trip.
var noTimeouts = pgx.TxOptions{BeginQuery: `BEGIN; SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0`}

// AddMany registers the series of grids with two statements, whatever
// their number: an INSERT of them all that leaves registered ones alone,
// and a SELECT of their definitions. It returns the definitions in the
// order of grids. A series registered with another zone or origin is an
// error wrapping ErrSeriesConflict (the first one found); a name that fails
// input.CheckName is refused before anything is written. Transient faults
// are retried.
//
// The INSERT runs in a transaction of its own without the role's statement
// and lock timeouts: the processes of a fleet start together and register
// the same series, so an INSERT waits for the others' to commit, which a
// role's lock_timeout would turn into an error of Start.
func AddMany(ctx context.Context, q interface {
	Querier
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}, schema string, grids []slot.Series) ([]Definition, error) {
	n := len(grids)
	names, intervals, zones, origins := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, g := range grids {
		if err := input.CheckName(g.Name()); err != nil {
			return nil, err
		}
		names[i], intervals[i], zones[i], origins[i] = g.Name(), g.Interval().String(), g.Location().String(), g.Origin()
	}
	err := retry.Do(ctx, func(ctx context.Context) error {
		return pgx.BeginTxFunc(ctx, q, noTimeouts, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
			ON CONFLICT (name, "interval") DO NOTHING`, schema), names, intervals, zones, origins)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	defs, err := query(ctx, q, false, sqlschema.Render(`SELECT `+selectColumns+` FROM {{schema}}.series
		WHERE (name, "interval") IN (SELECT * FROM unnest($1::text[], $2::text[]))`, schema), names, intervals)
	if err != nil {
		return nil, err
	}
	byKey := make(map[[2]string]Definition, len(defs))
	for _, d := range defs {
		byKey[[2]string{d.Grid.Name(), d.Grid.Interval().String()}] = d
	}
	out := make([]Definition, n)
	for i, g := range grids {
		d, ok := byKey[[2]string{names[i], intervals[i]}]
		if !ok {
			// Deleted between the two statements.
			return nil, fmt.Errorf("%w: %q with interval %s", ErrUnknownSeries, names[i], intervals[i])
		}
		if err := sameGrid(d.Grid, g); err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// sameGrid returns an error wrapping ErrSeriesConflict if grid does not
// have the zone and origin of have, the registered grid.
func sameGrid(have, grid slot.Series) error {
	if have.Location().String() != grid.Location().String() || !have.Origin().Equal(grid.Origin()) {
		return fmt.Errorf("%w: %s %s is registered with zone %s and origin %s, not zone %s and origin %s",
			ErrSeriesConflict, grid.Name(), grid.Interval(), have.Location(), slot.FormatTime(have.Origin()),
			grid.Location(), slot.FormatTime(grid.Origin()))
	}
	return nil
}

// knownKey is the context key of WithKnown.
type knownKey struct{}

// WithKnown returns ctx carrying definitions a caller has just read (from
// AddMany), so that opening a queue or a coverage client for one of them
// (Known) reads nothing more: the engine opens thousands at once.
func WithKnown(ctx context.Context, defs []Definition) context.Context {
	m := make(map[[2]string]Definition, len(defs))
	for _, d := range defs {
		m[[2]string{d.Grid.Name(), d.Grid.Interval().String()}] = d
	}
	return context.WithValue(ctx, knownKey{}, m)
}

// Known returns the definition of (name, interval) that ctx carries
// (WithKnown), if it carries one.
func Known(ctx context.Context, name string, interval slot.Interval) (Definition, bool) {
	m, _ := ctx.Value(knownKey{}).(map[[2]string]Definition)
	d, ok := m[[2]string{name, interval.String()}]
	return d, ok
}

// Lookup returns the definition ctx carries (Known), or reads it (Get).
func Lookup(ctx context.Context, q Querier, schema, name string, interval slot.Interval) (Definition, error) {
	if d, ok := Known(ctx, name, interval); ok {
		return d, nil
	}
	return Get(ctx, q, schema, name, interval)
}
