package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/almanacdev/almanac/internal/retry"
)

// MinServerVersion is the oldest PostgreSQL major version the schema works
// on: the history's index on slot starts is a BRIN minmax-multi index,
// new in PostgreSQL 14.
const MinServerVersion = 14

// ErrServerVersion is returned (wrapped) by Up when the server is older
// than MinServerVersion.
var ErrServerVersion = errors.New("PostgreSQL server too old")

// Server is the PostgreSQL server a database belongs to.
type Server struct {
	// Version is the version as the server reports it (server_version),
	// e.g. "16.4" or "15.14 (Debian 15.14-0+deb12u1)".
	Version string
	// Num is the version as a number (server_version_num), e.g. 160004.
	Num int
}

// ServerVersion returns the server's version, retrying transient faults
// within ctx's retry budget.
func ServerVersion(ctx context.Context, db DB) (Server, error) {
	var s Server
	err := retry.Do(ctx, func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, txOptions)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		return tx.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&s.Version, &s.Num)
	})
	return s, err
}

// check returns an error wrapping ErrServerVersion when s is older than
// MinServerVersion.
func (s Server) check() error {
	if s.Num < MinServerVersion*10000 {
		return fmt.Errorf("%w: almanac needs PostgreSQL %d or later, and this server runs %s", ErrServerVersion, MinServerVersion, s.Version)
	}
	return nil
}
