package dbtarget

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestURL(t *testing.T) {
	for _, tt := range []struct {
		env        map[string]string
		want, from string
	}{
		{nil, "postgres@127.0.0.1:5432/postgres", "the default database"},
		{map[string]string{"DATABASE_URL": "postgres://app:s3cret@db:6432/prod"}, "app@db:6432/prod", "DATABASE_URL"},
		{map[string]string{"PGDATABASE": "test"}, "postgres@127.0.0.1:5432/test", "the default database"},
		{map[string]string{"PGHOST": "db.internal", "PGPORT": "6543", "PGUSER": "o'brien"}, "o'brien@db.internal:6543/postgres", "the default database"},
		{map[string]string{"PGHOST": "/var/run/postgresql"}, "postgres@/var/run/postgresql:5432/postgres", "the default database"},
		// DATABASE_URL is taken as it is: PG* fill only what it leaves out.
		{map[string]string{"DATABASE_URL": "postgres://u@h/d", "PGDATABASE": "other"}, "u@h:5432/d", "DATABASE_URL"},
	} {
		url, from := URL(env(tt.env))
		require.Equal(t, tt.from, from, "%v", tt.env)
		require.Equal(t, tt.want, DescribeURL(url), "%v", tt.env)
		require.NotContains(t, DescribeURL(url), "s3cret")
	}
	require.Equal(t, "postgres@127.0.0.1:5432/postgres", DescribeURL(Default))
	require.Equal(t, "(malformed connection string)", DescribeURL("postgres://%zz"))
}
