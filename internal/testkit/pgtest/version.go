package pgtest

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// versionVariable names the PostgreSQL major version the tests are to run
// on (see URL).
const versionVariable = "ALMANAC_PG_VERSION"

// discoverVersion starts a throwaway cluster of the major version v asks
// for, and checks that the server it started is that version.
func discoverVersion(ctx context.Context, env environment, v string) discovery {
	major, err := strconv.Atoi(v)
	if err != nil || major < 10 {
		return discovery{err: fmt.Errorf("almanactest: %s=%q: expected a PostgreSQL major version such as 16", versionVariable, v)}
	}
	binDir, err := env.findVersion(major)
	if err != nil {
		return discovery{err: fmt.Errorf("almanactest: %s=%d asks for a throwaway PostgreSQL %d server: %w", versionVariable, major, major, err)}
	}
	d, err := startThrowaway(ctx, binDir)
	if err != nil {
		return discovery{err: fmt.Errorf("almanactest: %s=%d: %w", versionVariable, major, err)}
	}
	conn, err := pgx.Connect(ctx, d.url)
	if err == nil {
		got := serverMajor(conn.PgConn())
		_ = conn.Close(ctx)
		if got != major {
			err = fmt.Errorf("the server started from %s reports version %d", binDir, got)
		}
	}
	if err != nil {
		_ = d.cluster.Destroy()
		_ = os.RemoveAll(d.dir)
		return discovery{err: fmt.Errorf("almanactest: %s=%d: %w", versionVariable, major, err)}
	}
	return d
}

// serverMajor returns the major version of the server conn is connected
// to, from the server_version it reports at connection ("16.4", "15.14
// (Debian 15.14-0+deb12u1)"), or 0 if it reports none.
func serverMajor(conn *pgconn.PgConn) int {
	v := conn.ParameterStatus("server_version")
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}
