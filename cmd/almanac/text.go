package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every number a person reads is written by num, and every count of things
// by nouns, so that the CLI writes 2,016 and "1 slot" everywhere. --json
// prints plain numbers.

// num writes n with thousands separators: 23,052.
func num[N ~int | ~int32 | ~int64](n N) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// plural returns one when n is 1, else many.
func plural[N ~int | ~int32 | ~int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// nouns writes a count of things: "1 slot", "2,016 slots".
func nouns[N ~int | ~int32 | ~int64](n N, one, many string) string {
	return num(n) + " " + plural(n, one, many)
}

// unknownFlag finds the flag name in pflag's "unknown flag: --name".
var unknownFlag = regexp.MustCompile(`^unknown flag: --([^\s=]+)`)

// suggestFlag adds "did you mean --interval?" to an unknown flag's error
// when one of cmd's flags is within two edits of it, or starts with it.
func suggestFlag(cmd *cobra.Command, err error) error {
	m := unknownFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	best, bestDist := "", 3
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(m[1], f.Name)
		if strings.HasPrefix(f.Name, m[1]) && len(m[1]) >= 3 {
			d = min(d, 1)
		}
		if d < bestDist || d == bestDist && f.Name < best {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return fmt.Errorf("%w; see %q", err, cmd.CommandPath()+" --help")
	}
	return fmt.Errorf("%w; did you mean --%s?", err, best)
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
