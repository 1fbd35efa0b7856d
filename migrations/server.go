package migrations

import (
	"errors"
	"fmt"

	"github.com/almanacdev/almanac/internal/pgversion"
)

// minServerVersion is the oldest PostgreSQL major version the schema works
// on: the history's index on slot starts is a BRIN minmax-multi index,
// new in PostgreSQL 14.
const minServerVersion = 14

// ErrServerVersion is returned (wrapped) by Up when the server is older
// than PostgreSQL 14, the oldest the schema works on.
var ErrServerVersion = errors.New("PostgreSQL server too old")

// checkServer returns an error wrapping ErrServerVersion when s is older
// than minServerVersion.
func checkServer(s pgversion.Server) error {
	if s.Num < minServerVersion*10000 {
		return fmt.Errorf("%w: almanac needs PostgreSQL %d or later, and this server runs %s", ErrServerVersion, minServerVersion, s.Version)
	}
	return nil
}
