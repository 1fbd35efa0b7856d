// Command exported prints how many identifiers the module's public packages
// export, in total and per package, so that the size of the API is a
// number CI prints and a change can be held to (docs/design/public-api.md).
//
//	go run ./internal/tools/exported
//
// A public package is one outside internal/, cmd/ and examples/. Counted
// are the exported top-level names of its non-test files (types, aliases
// included, functions, constants and variables) and the exported methods
// of its exported types: every name a program can call or refer to.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	counts, err := count(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "exported:", err)
		os.Exit(1)
	}
	total := 0
	for _, c := range counts {
		total += c.n
	}
	fmt.Printf("exported identifiers: %d\n", total)
	for _, c := range counts {
		fmt.Printf("  %-14s %3d\n", c.pkg, c.n)
	}
}

// pkgCount is the exported names of one package.
type pkgCount struct {
	pkg string // import path relative to the module, "." for its root
	n   int
}

// count lists the public packages of the module in dir with go list and
// counts their exported names.
func count(dir string) ([]pkgCount, error) {
	cmd := exec.Command("go", "list", "-f", "{{.Module.Path}} {{.ImportPath}} {{.Dir}} {{join .GoFiles \",\"}}", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	var counts []pkgCount
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		module, path, pkgDir := fields[0], fields[1], fields[2]
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if rel == "" {
			rel = "."
		}
		if !public(rel) || len(fields) < 4 {
			continue
		}
		n := 0
		for _, name := range strings.Split(fields[3], ",") {
			k, err := exportedNames(filepath.Join(pkgDir, name))
			if err != nil {
				return nil, err
			}
			n += k
		}
		if n > 0 {
			counts = append(counts, pkgCount{rel, n})
		}
	}
	slices.SortFunc(counts, func(a, b pkgCount) int { return strings.Compare(a.pkg, b.pkg) })
	return counts, sc.Err()
}

// public reports whether the package at rel (relative to the module) is
// part of the API: not internal, not a command, not an example.
func public(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		if part == "internal" || part == "cmd" || part == "examples" {
			return false
		}
	}
	return true
}

// exportedNames counts the exported names one file declares.
func exportedNames(file string) (int, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return 0, err
	}
	if f.Name.Name == "main" {
		return 0, nil
	}
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || exportedReceiver(d.Recv.List[0].Type)) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n, nil
}

// exportedReceiver reports whether a method's receiver type, T, *T or a
// generic T[P], is exported: only then is the method part of the API.
func exportedReceiver(t ast.Expr) bool {
	for {
		switch e := t.(type) {
		case *ast.StarExpr:
			t = e.X
		case *ast.IndexExpr:
			t = e.X
		case *ast.IndexListExpr:
			t = e.X
		case *ast.Ident:
			return e.IsExported()
		default:
			return false
		}
	}
}
