//go:build linux

package topology

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestMain runs the tests, then stops the components they shared.
func TestMain(m *testing.M) { pgtest.Main(sharedRunner{m}) }

type sharedRunner struct{ m *testing.M }

func (r sharedRunner) Run() int {
	code := r.m.Run()
	shared.stopAll()
	return code
}

// shared holds the components started once per test binary: starting
// PgBouncer costs little, but the CLI build and a formation cost seconds.
var shared = &components{bouncers: map[string]*once[*PgBouncer]{}}

type components struct {
	mu       sync.Mutex
	bouncers map[string]*once[*PgBouncer]
	cli      once[string]
	stops    []func() error
}

// once is a value made on first use, with the error of making it.
type once[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (o *once[T]) get(make func() (T, error)) (T, error) {
	o.once.Do(func() { o.v, o.err = make() })
	return o.v, o.err
}

func (c *components) onStop(stop func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stops = append(c.stops, stop)
}

func (c *components) stopAll() {
	c.mu.Lock()
	stops := c.stops
	c.stops = nil
	c.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](); err != nil {
			fmt.Fprintln(os.Stderr, "topology:", err)
		}
	}
}

// bouncer returns the shared PgBouncer in mode in front of the tests'
// server. Tests must not stop it.
func bouncer(t *testing.T, mode string) *PgBouncer {
	t.Helper()
	url := pgtest.URL(t)
	shared.mu.Lock()
	o := shared.bouncers[mode]
	if o == nil {
		o = &once[*PgBouncer]{}
		shared.bouncers[mode] = o
	}
	shared.mu.Unlock()
	b, err := o.get(func() (*PgBouncer, error) {
		b, err := StartPgBouncer(context.Background(), PgBouncerOptions{Server: url, Mode: mode})
		if err == nil {
			shared.onStop(b.Stop)
		}
		return b, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// almanacCLI builds the CLI once per test binary, with the race detector
// when the tests have it.
func almanacCLI(t *testing.T) string {
	t.Helper()
	bin, err := shared.cli.get(func() (string, error) {
		dir, err := newWorkDir("cli") // removed by the next start if we die
		if err != nil {
			return "", err
		}
		shared.onStop(dir.remove)
		bin := filepath.Join(dir.path, "almanac")
		args := []string{"build", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		began := time.Now()
		out, err := exec.Command("go", append(args, "github.com/almanacdev/almanac/cmd/almanac")...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("build the CLI: %w\n%s", err, out)
		}
		fmt.Fprintf(os.Stderr, "topology: built the CLI in %s\n", time.Since(began).Round(time.Millisecond))
		return bin, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
