package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// riverModule is the module path of bench/river, which holds the River
// runner so that almanac's own module never requires River.
const riverModule = "github.com/almanacdev/almanac/bench/river"

// riverRunner is the River runner program, built from bench/river for the
// run, or the reason it could not be.
type riverRunner struct {
	path string // the built program
	dir  string // temporary directory holding it
	why  string // set when River cannot be run here
}

// riverRunner builds the runner on first use.
func (e *env) riverRunner(ctx context.Context) *riverRunner {
	if e.river == nil {
		e.river = buildRiver(ctx, e.opts.RiverDir, e.opts.Env)
	}
	return e.river
}

// buildRiver builds the runner with the go command from the module in dir,
// or in the checkout this package was built from.
func buildRiver(ctx context.Context, dir string, env []string) *riverRunner {
	if dir == "" {
		var why string
		if dir, why = findRiverModule(); why != "" {
			return &riverRunner{why: why}
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return &riverRunner{why: "the go command is not on PATH; it builds the River runner in " + dir}
	}
	tmp, err := os.MkdirTemp("", "almanac-bench-river-")
	if err != nil {
		return &riverRunner{why: fmt.Sprintf("temporary directory: %v", err)}
	}
	r := &riverRunner{dir: tmp, path: filepath.Join(tmp, "riverbench")}
	if runtime.GOOS == "windows" {
		r.path += ".exe"
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", r.path, ".")
	// The module stands alone: a go.work above the checkout must not pull
	// it into a workspace.
	cmd.Dir, cmd.Env = dir, append(slices.Clone(env), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		r.remove()
		return &riverRunner{why: fmt.Sprintf("building %s failed (%v): %s", dir, err, lastLine(out))}
	}
	return r
}

// findRiverModule looks for bench/river above the working directory, then
// in the checkout this file was compiled from.
func findRiverModule() (dir, why string) {
	var candidates []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			candidates = append(candidates, filepath.Join(d, "bench", "river"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", "..", "bench", "river"))
	}
	for _, d := range candidates {
		if isRiverModule(d) {
			return d, ""
		}
	}
	return "", "cannot find the bench/river module; run almanac bench from a source checkout of almanac"
}

func isRiverModule(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == riverModule
		}
	}
	return false
}

func (r *riverRunner) remove() {
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// run has River work jobs no-op jobs in a fresh schema with a pool of
// maxConns connections and returns jobs per second, timed by the runner
// from the client's start to the last completion.
func (r *riverRunner) run(ctx context.Context, e *env, jobs, maxConns int) (float64, error) {
	schema, err := e.createSchema(ctx, "river")
	if err != nil {
		return 0, err
	}
	defer e.dropSchema(schema)
	cmd := exec.CommandContext(ctx, r.path, "-schema", schema, "-jobs", strconv.Itoa(jobs),
		"-max-conns", strconv.Itoa(maxConns), "-checkpoint="+strconv.FormatBool(e.canCheckpoint))
	cmd.Env = e.opts.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("river runner: %w: %s", err, lastLine(stderr.Bytes()))
	}
	var res struct {
		Jobs    int     `json:"jobs"`
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return 0, fmt.Errorf("river runner: output %q: %w", stdout.String(), err)
	}
	if res.Jobs != jobs || res.Seconds <= 0 {
		return 0, errors.New("river runner: reported " + strings.TrimSpace(stdout.String()))
	}
	return float64(res.Jobs) / res.Seconds, nil
}

// lastLine returns the last non-empty line of out, for error messages.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
