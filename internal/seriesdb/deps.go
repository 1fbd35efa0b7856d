package seriesdb

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// Beginner is what SetAfter needs: a pool or a connection that begins
// transactions.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// depsLock orders changes of dependencies, so that two changes that each
// close half of a cycle cannot both pass the check. A table lock that
// conflicts with itself and not with readers (claims read the table): it
// needs a privilege on the table, unlike an advisory lock, which any role
// could take and hold to stall every change.
const depsLock = `LOCK TABLE {{schema}}.series_dependency IN SHARE ROW EXCLUSIVE MODE`

// cycleSQL finds a path of dependencies from the series ($1, $2) back to
// itself, as its "name interval" steps; no row when there is none.
const cycleSQL = `WITH RECURSIVE walk(n, i, path) AS (
	SELECT up_name, up_interval, ARRAY[name || ' ' || "interval", up_name || ' ' || up_interval]
	FROM {{schema}}.series_dependency WHERE name = $1 AND "interval" = $2
	UNION ALL
	SELECT d.up_name, d.up_interval, w.path || (d.up_name || ' ' || d.up_interval)
	FROM walk w JOIN {{schema}}.series_dependency d ON d.name = w.n AND d."interval" = w.i
	WHERE NOT (w.n = $1 AND w.i = $2) AND NOT (d.up_name || ' ' || d.up_interval) = ANY (w.path[2:])
)
SELECT path FROM walk WHERE n = $1 AND i = $2 LIMIT 1`

// SetAfter replaces the upstream series of (name, interval) with ups, in
// one transaction: every one must be registered (else an error wrapping
// ErrUnknownSeries), and a dependency that would close a cycle is refused
// with an error wrapping input.ErrInvalid that names the cycle. Nothing
// is changed when it fails. Transient faults are retried. Like AddMany's,
// its transaction runs without the role's statement and lock timeouts: the
// processes of a fleet start together and set the same dependencies, each
// waiting for the others' table lock.
func SetAfter(ctx context.Context, db Beginner, schema, name string, interval slot.Interval, ups []slot.Series) error {
	return retry.Do(ctx, func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, noTimeouts)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, sqlschema.Render(depsLock, schema)); err != nil {
			return err
		}
		if _, err := Get(ctx, tx, schema, name, interval); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlschema.Render(`DELETE FROM {{schema}}.series_dependency WHERE name = $1 AND "interval" = $2`, schema),
			name, interval.String()); err != nil {
			return err
		}
		for _, up := range ups {
			if up.Name() == name && up.Interval().String() == interval.String() {
				return fmt.Errorf("%w: %s %s cannot depend on itself (a cycle: %s %s → %s %s)", input.ErrInvalid,
					name, interval, name, interval, name, interval)
			}
			if _, err := Get(ctx, tx, schema, up.Name(), up.Interval()); err != nil {
				return fmt.Errorf("upstream: %w", err)
			}
			if _, err := tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.series_dependency (name, "interval", up_name, up_interval)
				VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, schema), name, interval.String(), up.Name(), up.Interval().String()); err != nil {
				return err
			}
		}
		var path []string
		err = tx.QueryRow(ctx, sqlschema.Render(cycleSQL, schema), name, interval.String()).Scan(&path)
		switch {
		case err == nil:
			return fmt.Errorf("%w: dependencies would form a cycle: %s", input.ErrInvalid, strings.Join(path, " → "))
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return tx.Commit(ctx)
	})
}

// After returns the upstream series of (name, interval), ordered by name
// and interval. Transient faults are retried.
func After(ctx context.Context, q Querier, schema, name string, interval slot.Interval) ([]Definition, error) {
	return query(ctx, q, false, sqlschema.Render(`SELECT `+selectColumns+` FROM {{schema}}.series
		WHERE (name, "interval") IN (SELECT up_name, up_interval FROM {{schema}}.series_dependency WHERE name = $1 AND "interval" = $2)
		ORDER BY name, "interval"`, schema), name, interval.String())
}

// Edges returns every dependency: for each downstream series (name,
// interval text), its upstream series, ordered by name and interval.
// Transient faults are retried.
func Edges(ctx context.Context, q Querier, schema string) (map[[2]string][][2]string, error) {
	var out map[[2]string][][2]string
	err := retry.Do(ctx, func(ctx context.Context) error {
		out = map[[2]string][][2]string{}
		rows, err := q.Query(ctx, sqlschema.Render(`SELECT name, "interval", up_name, up_interval FROM {{schema}}.series_dependency
			ORDER BY name, "interval", up_name, up_interval`, schema))
		if err != nil {
			return err
		}
		var down, up [2]string
		_, err = pgx.ForEachRow(rows, []any{&down[0], &down[1], &up[0], &up[1]}, func() error {
			out[down] = append(out[down], up)
			return nil
		})
		return err
	})
	return out, err
}
