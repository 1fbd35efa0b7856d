package progress

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNothingOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	b := ForTerminal(&buf, "x", true)
	b.Set(1, 2)
	b.Clear()
	require.Empty(t, buf.String(), "a buffer is not a terminal")
}

func TestDrawsAndClears(t *testing.T) {
	var buf bytes.Buffer
	b := &Bar{w: &buf, label: "materialize"}
	b.Set(1, 4)
	b.Set(2, 4) // within 100 ms: skipped
	b.Set(4, 4) // the end is always drawn
	out := buf.String()
	require.Equal(t, 2, strings.Count(out, "\r"), out)
	require.Contains(t, out, "materialize [#######.......................]  25% 1/4")
	require.Contains(t, out, "100% 4/4")
	b.Clear()
	require.True(t, strings.HasSuffix(buf.String(), "\r\033[K"))
}
