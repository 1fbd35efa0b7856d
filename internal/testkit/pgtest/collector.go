package pgtest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// flushCollector is FlushStats for servers before PostgreSQL 15, which
// have no pg_stat_force_next_flush: there a backend sends its statistics
// to the statistics collector when it goes idle, before it answers, but at
// most once per 500 ms (PGSTAT_STAT_INTERVAL), and a reader takes the
// collector's last file if it is at most 500 ms old. So each connection
// runs a statement lasting that interval, which has it send what it has
// when the statement ends, and the wait after it makes every reader ask
// for a file written 100 ms after that at least (the collector writes one
// as soon as it is asked, having taken in what came before the request).
func flushCollector(tb testing.TB, conns []*pgxpool.Conn) {
	tb.Helper()
	ctx := context.Background()
	errs := make(chan error, len(conns))
	for _, c := range conns {
		go func() {
			_, err := c.Exec(ctx, `SELECT pg_sleep(0.5)`)
			errs <- err
		}()
	}
	var err error
	for range conns {
		err = errors.Join(err, <-errs)
	}
	if err == nil {
		_, err = conns[0].Exec(ctx, `SELECT pg_sleep(0.6)`)
	}
	if err != nil {
		tb.Fatal(err)
	}
}
