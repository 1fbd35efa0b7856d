package almanac_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// The documentation is tested so that the front page cannot rot: every
// relative link of every Markdown file resolves (TestDocLinksResolve), and
// the README's shell blocks marked to run do run, against the test
// database (TestReadmeShellBlocksRun), as docs/sql.md's SQL does
// (TestSQLDocRuns).

var (
	// fence matches a fenced block with its info string, so that links
	// and headings inside code are not read as Markdown.
	fence = regexp.MustCompile("(?ms)^ *```[^\n]*\n.*?^ *```[ \t]*$")
	// inlineCode matches a code span.
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	// mdLink matches an inline link or image: [text](target "title").
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// heading matches an ATX heading.
	heading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	// runBlock matches a shell block marked to run in CI.
	runBlock = regexp.MustCompile("(?s)<!-- ci: run -->\n```sh\n(.*?)```")
)

// TestDocLinksResolve checks every relative link and image of every
// Markdown file in the repository: the file or directory exists, and an
// #anchor into a Markdown file names one of its headings (GitHub's slugs).
func TestDocLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	require.NotEmpty(t, files)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		page, err := os.ReadFile(path)
		require.NoError(t, err)
		a := headingAnchors(string(page))
		anchors[path] = a
		return a
	}
	var broken []string
	for _, file := range files {
		page, err := os.ReadFile(file)
		require.NoError(t, err)
		text := fence.ReplaceAllString(string(page), "")
		text = inlineCode.ReplaceAllString(text, "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if isExternal(target) {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if unescaped, err := url.PathUnescape(path); err == nil {
				path = unescaped
			}
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(resolved); err != nil {
					broken = append(broken, fmt.Sprintf("%s: %s: no such file", file, target))
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") && !anchorsOf(resolved)[anchor] {
				broken = append(broken, fmt.Sprintf("%s: %s: no heading with that anchor", file, target))
			}
		}
	}
	require.Empty(t, broken, "broken links in the documentation")
}

// TestDocLinkCheckerSeesBrokenLinks keeps the checker honest: the slugs it
// computes are GitHub's, and a link into a code block is not a link.
func TestDocLinkCheckerSeesBrokenLinks(t *testing.T) {
	a := headingAnchors("# What is guaranteed, and what is not\n## `almanac run`: the sidecar\n## Failover\n## Failover\n```sh\n# not a heading\n```\n")
	require.Equal(t, map[string]bool{
		"what-is-guaranteed-and-what-is-not": true,
		"almanac-run-the-sidecar":            true,
		"failover":                           true,
		"failover-1":                         true,
	}, a)
	require.Empty(t, mdLink.FindAllString(fence.ReplaceAllString("```\n[x](nowhere.md)\n```\n", ""), -1))
	require.Equal(t, "docs/a.md#b", mdLink.FindStringSubmatch(`see [a](docs/a.md#b "title")`)[1])
}

// TestFrontPagesStayShort holds the README and BENCHMARKS.md to the sizes
// a newcomer reads through (issue 36): the details belong in docs/, the
// history in CHANGELOG.md and docs/design.
func TestFrontPagesStayShort(t *testing.T) {
	for file, most := range map[string]int{"README.md": 200, "BENCHMARKS.md": 300} {
		page, err := os.ReadFile(file)
		require.NoError(t, err)
		require.LessOrEqual(t, bytes.Count(page, []byte("\n")), most, "%s has more than %d lines", file, most)
	}
}

// markdownFiles lists the repository's Markdown files, leaving out hidden
// directories and test data.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

func isExternal(target string) bool {
	for _, scheme := range []string{"http:", "https:", "mailto:"} {
		if strings.HasPrefix(target, scheme) {
			return true
		}
	}
	return false
}

// headingAnchors returns the anchors GitHub gives the headings of a page:
// the text lowercased, without punctuation, spaces as hyphens, and -1, -2…
// after repeats.
func headingAnchors(page string) map[string]bool {
	page = fence.ReplaceAllString(page, "")
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(page, -1) {
		text := mdLink.ReplaceAllStringFunc(m[1], func(link string) string {
			return link[strings.Index(link, "[")+1 : strings.Index(link, "]")]
		})
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// TestReadmeShellBlocksRun runs every README block marked
// `<!-- ci: run -->` with bash (-e, -u, pipefail) from the repository root,
// with the almanac built from this tree first on PATH, DATABASE_URL the
// test database and ALMANAC_SCHEMA a fresh schema.
func TestReadmeShellBlocksRun(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := runBlock.FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, blocks, "README.md marks no shell block with <!-- ci: run -->")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "almanac"), "./cmd/almanac")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"DATABASE_URL=" + pgtest.URL(t),
		"ALMANAC_SCHEMA=" + pgtest.Schema(t),
		"HOME=" + t.TempDir(),
		"TMPDIR=" + t.TempDir(),
	}
	for i, b := range blocks {
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b[1])
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Run(), "README block %d:\n%s\n%s", i+1, b[1], out.String())
		t.Logf("README block %d:\n%s", i+1, out.String())
	}
}
