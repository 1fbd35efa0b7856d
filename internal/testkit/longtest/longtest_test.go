package longtest

import "testing"

func TestPick(t *testing.T) {
	for _, c := range []struct {
		value string
		want  int
	}{{"", 1}, {"0", 1}, {"1", 2}, {"yes", 2}} {
		t.Setenv(Env, c.value)
		if got := Pick(1, 2); got != c.want {
			t.Errorf("%s=%q: Pick(1, 2) = %d, want %d", Env, c.value, got, c.want)
		}
	}
}
