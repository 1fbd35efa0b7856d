package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testToken is the actions' token of the tests.
const testToken = "correct-horse-battery-staple"

// fixture is a database seeded by real workers: a series of hourly slots in
// Berlin over the week in which clocks go forward (Sunday 2026-03-29 has 23
// hours), worked by a job whose handler fails some slots (two in backoff,
// one parked) and skips others; then three rows are deleted (a gap), one
// slot is held under a lease and a day after the job's end is left open.
type fixture struct {
	db     *pgtest.DB
	client *almanac.Client
	series almanac.Series
	berlin *time.Location
}

// The seeded slots by state; 167 in all (7 days of 24 hours, less one).
const (
	seedSlots    = 167
	seedComplete = 133
	seedSkipped  = 3
	seedOpen     = 24
	seedInFlight = 1
	seedFailed   = 2
	seedParked   = 1
	seedMissing  = 3
)

// parkMessage is the failure of the parked slot.
const parkMessage = "malformed row 4711: price \"12,5O\" is not a number"

// newSeries makes a schema, a client of it and a series in Berlin.
func newSeries(t testing.TB, name, interval string) (*pgtest.DB, *almanac.Client, almanac.Series) {
	t.Helper()
	db := pgtest.New(t)
	client, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Actor: "ops@example"})
	require.NoError(t, err)
	s, err := client.Series(context.Background(), name, interval, almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	return db, client, s
}

func seed(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	db, client, s := newSeries(t, "orders", "PT1H")
	f := &fixture{db: db, client: client, series: s, berlin: s.Location()}
	errUpstream := errors.New("upstream 503: orders feed unavailable")
	errParse := errors.New(parkMessage)
	require.NoError(t, client.Register(almanac.Job{
		Series: s, From: f.at(26, 0), To: f.day(32),
		Handler: func(ctx context.Context, _ pgx.Tx, sl almanac.Slot) error {
			switch {
			case sl.Start.Equal(f.at(29, 10)):
				return errParse
			case sl.Start.Equal(f.at(30, 6)), sl.Start.Equal(f.at(30, 7)):
				return errUpstream
			case sl.Start.Day() == 31 && sl.Start.Hour() < 3:
				return almanac.Skip("maintenance window: no orders")
			}
			return nil
		},
		// Parse errors give up at once; the others wait long enough that
		// the drain leaves them in backoff.
		Policy: almanac.Policy{Retry: func(_ int, err error) (time.Duration, bool) {
			return time.Hour, !errors.Is(err, errParse)
		}}}))
	_, err := client.Drain(ctx)
	require.ErrorIs(t, err, almanac.ErrIncomplete)
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start >= $1 AND slot_start < $2`, f.at(27, 13), f.at(27, 16))
	f.exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() + interval '1 hour'
		WHERE slot_start = $1`, f.at(31, 20))
	_, err = client.Materialize(ctx, s, f.day(32), f.day(33), almanac.WriteOptions{})
	require.NoError(t, err)
	return f
}

// day returns midnight of March d, 2026 in Berlin (d = 32 is April 1).
func (f *fixture) day(d int) time.Time { return time.Date(2026, 3, d, 0, 0, 0, 0, f.berlin) }

// at returns hour h of March d, 2026 in Berlin.
func (f *fixture) at(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, f.berlin) }

func (f *fixture) exec(sql string, args ...any) {
	_, err := f.db.Pool.Exec(context.Background(), sqlschema.Render(sql, f.db.Schema), args...)
	if err != nil {
		panic(err)
	}
}

// serve starts the page on a test server.
func (f *fixture) serve(t testing.TB, opts web.Options) *httptest.Server {
	return serve(t, web.Handler(f.client, opts))
}

// serve starts h on a test server.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hash is the page fragment that shows the series, optionally a range.
func (f *fixture) hash(from, to time.Time) string {
	h := "#series=orders&interval=PT1H"
	if !from.IsZero() {
		h += "&from=" + strings.ReplaceAll(slot.FormatTime(from), "+", "%2B") + "&to=" + strings.ReplaceAll(slot.FormatTime(to), "+", "%2B")
	}
	return h
}

// monthFixture is a series of five-minute slots in Berlin over September
// and October 2026 (17,580 slots; October 25 has 25 hours), written as
// materialize leaves them and then finished by SQL: all complete but
// twelve skipped slots on October 12, one failed slot in backoff on
// October 20, one parked slot on October 30 and an open last hour. Its
// whole-series calendar is a row of day cells per month.
type monthFixture struct {
	client *almanac.Client
	series almanac.Series
}

// The days of monthFixture that are not all complete, and its slots.
const (
	monthSlots   = 17580
	monthSkipDay = 12
	monthFailDay = 20
	monthParkDay = 30
)

func seedMonth(t testing.TB) *monthFixture {
	t.Helper()
	ctx := context.Background()
	db, client, s := newSeries(t, "clicks", "PT5M")
	loc := s.Location()
	from, to := time.Date(2026, 9, 1, 0, 0, 0, 0, loc), time.Date(2026, 11, 1, 0, 0, 0, 0, loc)
	require.Equal(t, monthSlots, int(to.Sub(from)/(5*time.Minute)))
	res, err := client.Materialize(ctx, s, from, to, almanac.WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, monthSlots, res.Changed)
	oct := func(d, h int) time.Time { return time.Date(2026, 10, d, h, 0, 0, 0, loc) }
	exec := func(sql string, args ...any) {
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(t, err)
	}
	exec(`UPDATE {{schema}}.slot SET status = 'SKIP', message = 'no traffic recorded' WHERE slot_start >= $1 AND slot_start < $2`,
		oct(monthSkipDay, 0), oct(monthSkipDay, 1))
	exec(`UPDATE {{schema}}.slot SET fail_count = 1, attempts = 1, not_before = now() + interval '1 hour', message = 'upstream 503'
		WHERE slot_start = $1`, oct(monthFailDay, 6))
	exec(`UPDATE {{schema}}.slot SET fail_count = 3, attempts = 3, not_before = 'infinity', message = 'malformed click log'
		WHERE slot_start = $1`, oct(monthParkDay, 10))
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', attempts = 1, completed_at = now()
		WHERE status = 'AVAILABLE' AND fail_count = 0 AND slot_start < $1`, oct(31, 23))
	return &monthFixture{client: client, series: s}
}
