package redact

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/prod", "postgres://app:REDACTED@db:5432/prod"},
		{"DATABASE_URL=postgresql://app:s3cret@db/prod?sslmode=require", "DATABASE_URL=postgresql://app:REDACTED@db/prod?sslmode=require"},
		// net/url reads the user information up to the last "@".
		{"postgres://app:p@ss@db/prod", "postgres://app:REDACTED@db/prod"},
		{"postgres://:s3cret@db/prod", "postgres://:REDACTED@db/prod"},
		{"postgres://app:s3cret@h1:5432,h2:5433/prod", "postgres://app:REDACTED@h1:5432,h2:5433/prod"},
		{"connect to postgres://app@db/prod failed", "connect to postgres://app@db/prod failed"},
		{"see https://example.com/a:b@c", "see https://example.com/a:b@c"},
		{"host=db user=app password=s3cret dbname=prod", "host=db user=app password=REDACTED dbname=prod"},
		{"host=db password='s3 cr\\'et' dbname=prod", "host=db password=REDACTED dbname=prod"},
		{"PGPASSWORD=s3cret", "PGPASSWORD=REDACTED"},
		{"export DB_PASSWORD = s3cret", "export DB_PASSWORD = REDACTED"},
		{`{"user":"app","password":"s3cret"}`, `{"user":"app","password":REDACTED`},
		{`password='s3cret'x and more`, `password=REDACTED and more`},
		{"postgres://db/prod?user=app&password=s3cret&sslmode=require", "postgres://db/prod?user=app&password=REDACTED&sslmode=require"},
		{"sslpassword=k3y", "sslpassword=REDACTED"},
		{"FATAL: password authentication failed for user \"app\"", "FATAL: password authentication failed for user \"app\""},
		{"nothing to see", "nothing to see"},
	} {
		require.Equal(t, tt.want, String(tt.in), "%q", tt.in)
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "postgres://a:b@c/d", "password=x", "PASSWORD: 'a b'", `"passwd":"x\"y"`, "x://u:p@q@r", "\xff://a:b@c"} {
		f.Add(s, "s3cret", "app")
	}
	f.Fuzz(func(t *testing.T, text, password, user string) {
		out := String(text)
		require.Equal(t, out, String(out), "idempotent")
		// A planted password never survives, whatever surrounds it.
		if !wordOnly(password) || !wordOnly(user) {
			return
		}
		url := "postgres://" + user + ":" + password + "@db.example/prod"
		require.NotContains(t, String(text+" "+url+" "+text), url, "URL")
		pair := "password=" + password
		require.NotContains(t, String(text+" "+pair+" "+text), pair+" ", "key=value")
	})
}

// wordOnly reports whether s is a non-empty run of ASCII letters and
// digits: a password that the planted contexts delimit unambiguously.
func wordOnly(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == ""
}
