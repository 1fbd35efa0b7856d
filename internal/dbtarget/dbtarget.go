// Package dbtarget holds the one rule by which almanac's CLI, its demo and
// its tests choose a database when none is named, and the way every message
// names the database it talks about (user@host:port/db, never a password).
//
// The rule: DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres,
// of which PGHOST, PGPORT, PGUSER and PGDATABASE replace the part they name
// when set (PGPASSWORD and ~/.pgpass supply a password, as for psql). The
// CLI's --database-url comes before it; the tests' TEST_DATABASE_URL too.
// The default is the server and database every PostgreSQL installation
// has, so `almanac demo --keep`, `go test` and a later `almanac status` look
// in the same place.
package dbtarget

import (
	"cmp"
	"fmt"
	neturl "net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Default is the database used when neither DATABASE_URL nor a PG*
// variable names one.
const Default = "postgres://postgres@127.0.0.1:5432/postgres"

// Rule states the rule in one sentence, for help texts.
const Rule = "DATABASE_URL, else " + Default + " (PGHOST, PGPORT, PGUSER and PGDATABASE replace their part when set)"

// URL returns the connection string the rule gives for the environment
// getenv reads, and where it came from, for messages ("DATABASE_URL", or
// "the default database"). The string from DATABASE_URL may hold a
// password: show it only through Describe.
func URL(getenv func(string) string) (url, from string) {
	if url := getenv("DATABASE_URL"); url != "" {
		return url, "DATABASE_URL"
	}
	return DefaultURL(getenv), "the default database"
}

// DefaultURL returns Default with the parts that PGHOST, PGPORT, PGUSER and
// PGDATABASE set replaced. PGHOST may be a list of hosts or a socket
// directory, as for libpq.
func DefaultURL(getenv func(string) string) string {
	get := func(name, def string) string { return cmp.Or(getenv(name), def) }
	host, port := get("PGHOST", "127.0.0.1"), get("PGPORT", "5432")
	u := neturl.URL{Scheme: "postgres", User: neturl.User(get("PGUSER", "postgres")), Path: "/" + get("PGDATABASE", "postgres")}
	if strings.HasPrefix(host, "/") {
		u.RawQuery = neturl.Values{"host": {host}, "port": {port}}.Encode()
		return u.String()
	}
	hosts := strings.Split(host, ",")
	for i, h := range hosts {
		if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
			h = "[" + h + "]"
		}
		hosts[i] = h + ":" + port
	}
	u.Host = strings.Join(hosts, ",")
	return u.String()
}

// Describe names the database of a connection configuration as
// user@host:port/db, the first host when there are several; never the
// password.
func Describe(cfg *pgconn.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// DescribeURL names the database of a connection string as Describe does,
// or says the string is malformed (without repeating it: it may hold a
// password).
func DescribeURL(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return "(malformed connection string)"
	}
	return Describe(cfg)
}
