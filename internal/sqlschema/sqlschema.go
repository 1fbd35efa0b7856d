// Package sqlschema validates schema names and renders SQL templates for a
// schema. Every package that writes SQL text goes through it, so a schema name
// is checked in one place and never pasted into SQL unquoted.
package sqlschema

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/input"
)

// Default is the schema almanac uses when none is configured.
const Default = "almanac"

// ErrInvalid is wrapped by every error Check returns. Like every bad input,
// it also matches slot.ErrInvalid.
var ErrInvalid = input.Kind("invalid schema name")

// ErrInvalidRole is wrapped by every error CheckRole returns; it also
// matches slot.ErrInvalid.
var ErrInvalidRole = input.Kind("invalid role name")

// maxLen is PostgreSQL's NAMEDATALEN-1: longer identifiers are silently
// truncated by the server, so two long names could end up as one schema.
const maxLen = 63

// Check reports whether name can be used as a schema name: 1 to 63 bytes of
// valid UTF-8 without NUL or control characters, and not a system schema:
// information_schema, or any name starting with pg_ (pg_catalog, pg_toast,
// pg_temp_N; PostgreSQL reserves the prefix). Any other character,
// including quotes and semicolons, is allowed because the name is always
// quoted as an identifier.
func Check(name string) error {
	if err := checkIdentifier(ErrInvalid, name); err != nil {
		return err
	}
	if strings.HasPrefix(name, "pg_") || name == "information_schema" {
		return fmt.Errorf("%w: %q is a system schema (PostgreSQL reserves names starting with pg_, and information_schema); expected a schema of your own such as %q",
			ErrInvalid, name, Default)
	}
	return nil
}

// CheckRole reports whether name can name a role in SQL almanac prints (see
// migrations.Grants): the rules of Check for identifiers, and not one of
// PostgreSQL's predefined pg_ roles, which cannot be granted to this way.
func CheckRole(name string) error {
	if err := checkIdentifier(ErrInvalidRole, name); err != nil {
		return err
	}
	if strings.HasPrefix(name, "pg_") {
		return fmt.Errorf("%w: %q: PostgreSQL reserves role names starting with pg_; expected a role of your own such as \"app\"", ErrInvalidRole, name)
	}
	return nil
}

// checkIdentifier applies the rules every quoted identifier must follow,
// with errors wrapping kind.
func checkIdentifier(kind error, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty; expected a PostgreSQL identifier such as %q", kind, Default)
	case len(name) > maxLen:
		return fmt.Errorf("%w: %q is %d bytes; expected at most %d (PostgreSQL truncates longer names)", kind, abbreviate(name), len(name), maxLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", kind, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains control character %U", kind, name, r)
		}
	}
	return nil
}

// Quote returns name quoted as an SQL identifier.
func Quote(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

// Render replaces every {{schema}} in sql with the quoted schema name.
func Render(sql, schema string) string {
	return strings.ReplaceAll(sql, "{{schema}}", Quote(schema))
}

func abbreviate(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:40] + "…"
}
