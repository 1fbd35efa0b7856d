package almanac

import (
	"context"

	"github.com/almanacdev/almanac/internal/pgversion"
)

// ServerVersion returns the version of the PostgreSQL server the client's
// pool connects to, as the server reports it (server_version), e.g. "16.4"
// or "15.14 (Debian 15.14-0+deb12u1)". almanac needs PostgreSQL 14 or
// later: Migrate refuses an older server with ErrServerVersion. Transient
// faults are retried within Options.RetryBudget.
func (c *Client) ServerVersion(ctx context.Context) (string, error) {
	s, err := pgversion.Of(c.call(ctx), c.pool)
	return s.Version, err
}
