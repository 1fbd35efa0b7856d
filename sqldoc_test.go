package almanac_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
)

// sqlBlock matches a fenced SQL example of a Markdown page.
var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// docObject matches the schema-qualified objects the examples use, on the
// default schema; almanac.actor and almanac.engine are settings, not
// objects, and are left alone.
var docObject = regexp.MustCompile(`\balmanac\.(series|slot_event|slot_history|slot|settings|wake_channel)\b`)

// TestSQLDocRuns runs every SQL example of docs/sql.md, in order, with
// psql, on a fresh schema, and checks what they claim: the re-open wakes a
// listening worker and is recorded with its actor and reason, and the skip
// is recorded.
func TestSQLDocRuns(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatal("psql not found: install it with `apt-get install -y postgresql-client`")
	}
	page, err := os.ReadFile("docs/sql.md")
	require.NoError(t, err)
	blocks := sqlBlock.FindAllStringSubmatch(string(page), -1)
	require.GreaterOrEqual(t, len(blocks), 9)

	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := make(chan wake.Event, 100)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{wake.Channel(db.Schema)}.Sanitize())
	require.NoError(t, err)
	listening, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			n, err := conn.Conn().WaitForNotification(listening)
			if err != nil {
				return
			}
			if ev, err := wake.Parse(n.Payload); err == nil {
				events <- ev
			}
		}
	}()
	defer func() {
		stop()
		<-stopped
		_ = conn.Conn().Close(context.Background()) // interrupted mid-wait: not reusable
		conn.Release()
	}()
	// The morning's slots exist and are complete, so that the re-open has
	// work to do; the examples insert the rest of the day.
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, completed_at)
		SELECT 'sensor_report', 'PT1H', s, s + interval '1 hour', 'COMPLETE', now()
		FROM generate_series(timestamptz '2026-03-01T00:00:00Z', '2026-03-01T11:00:00Z', interval '1 hour') AS s`, db.Schema))
	require.NoError(t, err)

	schema := sqlschema.Quote(db.Schema)
	for i, b := range blocks {
		script := docObject.ReplaceAllString(b[1], strings.ReplaceAll(schema, "$", "$$")+".$1")
		cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db.URL, "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Run(), "example %d:\n%s\n%s", i+1, b[1], out.String())
	}

	count := func(sql string) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(sql, db.Schema)).Scan(&n))
		return n
	}
	require.Equal(t, 24, count(`SELECT count(*) FROM {{schema}}.slot`))
	require.Equal(t, 2, count(`SELECT count(*) FROM {{schema}}.slot_event WHERE event = 'reopened' AND generation = 2
		AND actor = 'invoice-service' AND message = 'late data from sensor 7'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM {{schema}}.slot_event WHERE event = 'skipped' AND actor = 'maintenance-calendar'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM {{schema}}.settings WHERE history_retention = '30 days'`))
	// One notification for each insert (the setup's and the example's, of
	// any series), one for the re-open.
	for _, want := range []wake.Event{{Reason: "sql"}, {Reason: "sql"}, {Name: "sensor_report", Interval: "PT1H", Reason: "sql"}} {
		select {
		case ev := <-events:
			require.Equal(t, want, ev)
		case <-ctx.Done():
			t.Fatalf("no notification %v", want)
		}
	}
}
