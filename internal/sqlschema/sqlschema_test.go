package sqlschema

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"almanac", "public", "my app", `quo"te`, "semi;colon", "Grüße", "PG_upper", "x_pg_", strings.Repeat("a", 63)} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"", "empty"},
		{strings.Repeat("a", 64), "64 bytes"},
		{"bad\xff", "not valid UTF-8"},
		{"a\tb", "control character"},
		{"a\x00b", "control character"},
		// System schemas: almanac's tables must never be created in, or
		// looked for in, the catalogs.
		{"pg_catalog", "system schema"},
		{"information_schema", "system schema"},
		{"pg_toast", "system schema"},
		{"pg_temp_3", "system schema"},
		{"pg_", "system schema"},
		{"pg_anything", "reserves names starting with pg_"},
	} {
		err := Check(tt.in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Check(%q) = %v, want a one-line ErrInvalid containing %q", tt.in, err, tt.want)
			continue
		}
		if named := strconv.Quote(tt.in); len(tt.in) < 40 && tt.in != "" && !strings.Contains(err.Error(), named) {
			t.Errorf("Check(%q) = %v does not name the schema as %s", tt.in, err, named)
		}
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"almanac", "pg_catalog", "information_schema", "a\x00b", "", `x"; DROP SCHEMA public; --`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := Check(name)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line ErrInvalid: %v", name, err)
			}
			return
		}
		if strings.HasPrefix(name, "pg_") || name == "information_schema" || len(name) > 63 {
			t.Fatalf("%q was accepted", name)
		}
		q := Quote(name)
		if !strings.HasPrefix(q, `"`) || !strings.HasSuffix(q, `"`) || strings.Count(q[1:len(q)-1], `"`)%2 != 0 {
			t.Fatalf("Quote(%q) = %s is not one quoted identifier", name, q)
		}
	})
}
