package web_test

import (
	"context"
	"errors"
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

func seed(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	client, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Actor: "ops@example"})
	require.NoError(t, err)
	s, err := client.Series(ctx, "orders", "PT1H", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
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
	_, err = client.Drain(ctx)
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
	srv := httptest.NewServer(web.Handler(f.client, opts))
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
