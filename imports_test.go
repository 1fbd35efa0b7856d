package almanac_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportRules enforces the import rules of docs/ARCHITECTURE.md on the
// module's packages, as go list reports them (non-test imports unless
// said):
//
//   - layers import only downwards: slot, then migrations, acquire and
//     coverage, then scheduler, the root, then almanactest and web, then
//     the CLI and the examples; acquire and coverage never import each
//     other, and slot imports only internal/input;
//   - the engine's internal packages import only slot and each other;
//   - no package outside internal/testkit and almanactest (the public
//     test kit built on it) imports test tooling, and the almanac binary
//     links none (go list -deps);
//   - the CLI imports neither acquire, coverage nor scheduler; the coverage
//     page neither; the examples only the root, pgx and the standard
//     library.
func TestImportRules(t *testing.T) {
	pkgs := goList(t, "./...")
	const mod = "github.com/almanacdev/almanac"
	rel := func(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, mod), "/") }
	// The rank of each layer: a package imports only packages of a lower
	// rank, or engine internals.
	rank := map[string]int{
		"slot": 0, "migrations": 1, "acquire": 1, "coverage": 1, "scheduler": 2,
		"": 3, "almanactest": 4, "web": 4, "internal/demo/sensor": 4, "internal/progress": 4,
		"cmd/almanac": 5,
	}
	engineInternal := func(p string) bool {
		return strings.HasPrefix(p, "internal/") && !strings.HasPrefix(p, "internal/testkit") &&
			!strings.HasPrefix(p, "internal/tools") && p != "internal/demo/sensor" && p != "internal/progress"
	}
	for _, p := range pkgs {
		from := rel(p.ImportPath)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			to := rel(imp)
			switch {
			case strings.HasPrefix(to, "internal/testkit") && !strings.HasPrefix(from, "internal/testkit") && from != "almanactest":
				t.Errorf("%s imports test tooling %s", from, to)
			case from == "acquire" && to == "coverage", from == "coverage" && to == "acquire":
				t.Errorf("%s imports %s: acquire and coverage never import each other", from, to)
			case from == "slot" && to != "internal/input":
				t.Errorf("slot imports %s: the calendar imports only internal/input", to)
			case engineInternal(from) && !engineInternal(to) && to != "slot":
				t.Errorf("%s imports %s: the engine's internal packages import only slot and each other", from, to)
			case strings.HasPrefix(from, "examples/") && to != "":
				t.Errorf("%s imports %s: the examples import only the root package, pgx and the standard library", from, to)
			case (from == "cmd/almanac" || from == "web") && slices.Contains([]string{"acquire", "coverage", "scheduler"}, to):
				t.Errorf("%s imports %s: it is a client of the root package", from, to)
			}
			fromRank, fromOK := rank[from]
			toRank, toOK := rank[to]
			if fromOK && toOK && toRank >= fromRank {
				t.Errorf("%s imports %s: imports flow downwards only (%s is layer %d, %s layer %d)", from, to, from, fromRank, to, toRank)
			}
		}
		if strings.HasPrefix(rel(p.ImportPath), "examples/") {
			for _, imp := range p.Imports {
				if !strings.HasPrefix(imp, mod) && strings.Contains(strings.Split(imp, "/")[0], ".") && !strings.HasPrefix(imp, "github.com/jackc/pgx/") {
					t.Errorf("%s imports %s: the examples import only the root package, pgx and the standard library", rel(p.ImportPath), imp)
				}
			}
		}
	}
	for _, dep := range goList(t, "-deps", "./cmd/almanac") {
		if strings.HasPrefix(dep.ImportPath, mod+"/internal/testkit") {
			t.Errorf("the almanac binary links test tooling: %s", rel(dep.ImportPath))
		}
	}
}

// goPackage is what TestImportRules reads of go list -json.
type goPackage struct {
	ImportPath string
	Imports    []string
}

func goList(t *testing.T, args ...string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports"}, args...)...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var pkgs []goPackage
	dec := json.NewDecoder(out)
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	require.NoError(t, cmd.Wait())
	require.NotEmpty(t, pkgs)
	return pkgs
}
