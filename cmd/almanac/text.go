package main

import (
	"fmt"
	"strings"
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
