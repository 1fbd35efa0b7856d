//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// The upstream series of a dependencies round: each of its slots covers
// five of the series'.
const (
	upstreamName     = "chaos_ingest"
	upstreamInterval = "PT5M"
)

// TestChaosDependencies runs rounds in which the series depends on an
// upstream series (upstreamName, PT5M, finished by the suite) whose slots
// are re-opened and done again while the workers are killed and frozen
// (see doc.go). Its workers' handlers are shorter and it restarts no
// server, so that it adds less than a minute to a default run.
func TestChaosDependencies(t *testing.T) {
	chaos(t, func(t *testing.T) *scenario {
		sc := newScenario(t, []string{seriesName}, rangeFrom, rangeTo, depsFleet(), false)
		sc.deps = true
		return sc
	})
}

// depsFleet is fleetPlan with a quarter of its handlers' run time, so the
// round fits its budget; but for the hostile workers', which must outlast
// the role's timeouts.
func depsFleet() []fleetWorker {
	fleet := make([]fleetWorker, len(fleetPlan))
	for i, w := range fleetPlan {
		if !w.hostile {
			w.workMin, w.workMax = w.workMin/4, w.workMax/4
		}
		fleet[i] = w
	}
	return fleet
}

// addUpstream registers the upstream series, every slot of it over the
// range done, and makes the series depend on it.
func (r *round) addUpstream(ctx context.Context) {
	up, err := slot.NewSeries(upstreamName, mustInterval(upstreamInterval), time.UTC, time.Time{})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, _, err := seriesdb.Add(ctx, r.admin, r.schema, up); err != nil {
		r.t.Fatal(err)
	}
	var starts, ends []time.Time
	for sl := range up.Slots(r.sc.from, r.sc.to) {
		starts, ends = append(starts, sl.Start), append(ends, sl.End)
	}
	_, err = r.admin.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, completed_at)
		SELECT $1, $2, s, e, 'COMPLETE', clock_timestamp() FROM unnest($3::timestamptz[], $4::timestamptz[]) AS u(s, e)`, r.schema),
		upstreamName, upstreamInterval, starts, ends)
	if err != nil {
		r.t.Fatal(err)
	}
	_, err = r.admin.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.series_dependency (name, "interval", up_name, up_interval)
		VALUES ($1, $2, $3, $4)`, r.schema), seriesName, interval, upstreamName, upstreamInterval)
	if err != nil {
		r.t.Fatal(err)
	}
}

// reopenUpstream re-opens a run of upstream slots over the part of the
// range the workers have been through, by plain SQL, as late data would
// (the trigger re-opens the finished slots after them and marks the held
// ones), and after a pause does them again as an upstream run would: a
// new fence, completed on the database clock. Meanwhile the slots after
// them wait for them. Each statement is repeated after a deadlock, as a
// client of plain SQL must: it updates several upstream rows, which the
// completions of downstream slots (a batch's several) also lock, FOR
// SHARE in stale_cause, in an order of their own, so PostgreSQL may roll
// the statement back whole.
func (r *round) reopenUpstream(f plannedFault) (string, error) {
	r.restart.RLock()
	defer r.restart.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	firstOpen, err := r.firstOpen(ctx)
	if err != nil {
		return "", err
	}
	// 2 to 10 upstream slots (10 to 50 of the series'), ending near the
	// first open slot, where workers are busy.
	width := (2 + int(f.pick2*8)) * 5
	end := max(width, int(firstOpen.Sub(rangeFrom)/time.Minute)+int(f.pick*20))
	lo, hi := minute(max(0, end-width)/5*5), minute(min(slots, end)/5*5)
	deadlocks := 0
	exec := func(sql string) (pgconn.CommandTag, error) {
		for {
			tag, err := r.admin.Exec(ctx, sqlschema.Render(sql, r.schema), upstreamName, upstreamInterval, lo, hi)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "40P01" { // deadlock_detected
				return tag, err
			}
			deadlocks++
		}
	}
	tag, err := exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'chaos: late upstream data'
		WHERE name = $1 AND "interval" = $2 AND slot_start >= $3 AND slot_start < $4 AND status = 'COMPLETE'`)
	if err != nil {
		return "", err
	}
	r.upstreamReopened.Add(tag.RowsAffected())
	time.Sleep(f.pause)
	_, err = exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', fence = nextval('{{schema}}.fence_seq'),
			completed_at = clock_timestamp(), message = NULL
		WHERE name = $1 AND "interval" = $2 AND slot_start >= $3 AND slot_start < $4 AND status = 'AVAILABLE'`)
	if err != nil {
		return "", fmt.Errorf("upstream slots [%s, %s) left re-opened: %w", lo.Format(time.RFC3339), hi.Format(time.RFC3339), err)
	}
	return fmt.Sprintf("upstream [%s, %s): %d re-opened, done again after %s (%d deadlock(s) repeated)",
		lo.Format(time.RFC3339), hi.Format(time.RFC3339), tag.RowsAffected(), f.pause, deadlocks), nil
}

// checkUpstream checks that every COMPLETE slot of the series was done
// on the current generations of its upstream slots: each of them is
// COMPLETE, and completed before the run that completed the slot began
// (its ledger entry, on the database clock). A run that began earlier
// read what the upstream slot was before it was done again.
func (rep *report) checkUpstream(ctx context.Context, r *round) {
	type stale struct {
		start, upStart, began time.Time
		fence                 int64
		upStatus              string
		upDone                *time.Time
	}
	for _, s := range load(ctx, r, `SELECT s.slot_start, s.fence, l.started, u.slot_start, u.status, u.completed_at
		FROM {{schema}}.slot s
		JOIN {{schema}}.chaos_ledger l ON l.fence = s.fence
		JOIN {{schema}}.slot u ON u.name = '`+upstreamName+`' AND u."interval" = '`+upstreamInterval+`'
			AND u.slot_start < s.slot_end AND u.slot_end > s.slot_start
		WHERE s.name = '`+seriesName+`' AND s.status = 'COMPLETE'
		  AND (u.status <> 'COMPLETE' OR u.completed_at IS NULL OR u.completed_at > l.started)
		ORDER BY s.slot_start, u.slot_start`,
		func(v *stale) []any { return []any{&v.start, &v.fence, &v.began, &v.upStart, &v.upStatus, &v.upDone} }) {
		rep.failFences(slotKey{seriesName, s.start.UTC()}, []int64{s.fence},
			"COMPLETE by the run of fence %d, begun at %s, but upstream slot %s is %s, done at %s",
			s.fence, stamp(s.began), s.upStart.UTC().Format(time.RFC3339), s.upStatus, optStamp(s.upDone))
	}
}
