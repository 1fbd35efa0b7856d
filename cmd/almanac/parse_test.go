package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
)

func TestParseCatchUp(t *testing.T) {
	for text, want := range map[string]almanac.CatchUp{
		"all": almanac.CatchUpAll, "none": almanac.CatchUpNone, "latest:3": almanac.CatchUpLatest(3), "latest 1": almanac.CatchUpLatest(1),
	} {
		got, err := parseCatchUp(text)
		require.NoError(t, err)
		require.Equal(t, want, got)
		again, err := parseCatchUp(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
	for _, bad := range []string{"", "ALL", "latest", "latest:0", "latest:-1", "latest:x", "latest:01", "some", "latest:99999999"} {
		_, err := parseCatchUp(bad)
		require.ErrorIs(t, err, almanac.ErrInvalid, "%q", bad)
	}
	require.Equal(t, "all", almanac.CatchUp{}.String())
	require.NotEqual(t, almanac.CatchUpNone, almanac.CatchUp{}, "the zero value is all, not none")
}

func FuzzParseCatchUp(f *testing.F) {
	for _, s := range []string{"all", "none", "latest:3", "latest 1", "latest:0", "latest:", "latest:1000001", "ALL", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := parseCatchUp(in)
		if err != nil {
			if !errors.Is(err, almanac.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line ErrInvalid: %v", in, err)
			}
			return
		}
		again, err := parseCatchUp(c.String())
		if err != nil || again != c {
			t.Fatalf("%q → %s does not parse back: %v", in, c, err)
		}
	})
}
