package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/longtest"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestCommandsUnderFaults runs every database command while one of its
// backends is terminated every 50–200 ms: each must still succeed (exit
// 0), the faults absorbed by the retries, none reported.
func TestCommandsUnderFaults(t *testing.T) {
	t.Parallel() // its own schema and processes
	app := fmt.Sprintf("almanac-cli-fault-%d", rand.Uint32())
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	env := map[string]string{"DATABASE_URL": u.String()}
	schema := freshSchema(t, "cli_fault_")

	var kills atomic.Int64
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Add(1)
	go func() {
		defer killer.Done()
		admin := pgtest.Pool(t)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(50+rand.IntN(151)) * time.Millisecond):
			}
			var n int64
			if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM (
				SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY random() LIMIT 1) victim`, app).Scan(&n); err == nil {
				kills.Add(n)
			}
		}
	}()
	stopKiller := sync.OnceFunc(func() { close(stop); killer.Wait() })
	t.Cleanup(stopKiller)

	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}
	// The sidecar runs a process per slot: 288 of them take most of the
	// test's time, so by default it runs the first two hours' 24.
	runSpan := longtest.Pick([]string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T02:00:00Z"}, day)
	on := func(args ...string) []string { return append([]string{"--schema", schema}, args...) }
	series := []string{"sensor", "--interval", "PT5M"}
	commands := [][]string{
		on("migrate", "up"),
		on("migrate", "status"),
		on(append([]string{"series", "add"}, series...)...),
		on("series", "list"),
		on(append(append([]string{"materialize"}, series...), day...)...),
		on(append(append([]string{"gaps"}, series...), day...)...),
		on(append(append([]string{"status"}, series...), day...)...),
		on(append(append([]string{"run"}, series...), append(runSpan, "--once", "--", "true")...)...),
		on(append(append([]string{"reopen"}, series...), append(day, "--reason", "late data")...)...),
		on(append(append([]string{"retry"}, series...), day...)...),
		on(append(append([]string{"skip"}, series...), "--from", "2026-03-02T00:00:00Z", "--to", "2026-03-02T01:00:00Z", "--reason", "holiday")...),
	}
	// Three rounds before a release; one, each command once, otherwise.
	for round := range longtest.Pick(1, 3) {
		for _, args := range commands {
			r := cliEnv(t, env, args...)
			require.Equal(t, 0, r.code, "round %d, %v: %s", round, args[2:], r.stderr)
		}
	}
	stopKiller()
	t.Logf("%d backends terminated", kills.Load())
	require.Positive(t, kills.Load())
}
