package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns a name as it is safe to print in text output: the name
// itself when every character shows as what it is, else the name quoted
// with Go escapes ("sensor\u200b", "\u202erosnes"), so that a series
// another tool stored with an invisible, bidirectional-control or control
// character, or a leading or trailing space, never looks like another
// series. A name that itself starts with a double quote is quoted too, so
// no plain name reads like the quoted form of another. (almanac refuses such characters in the names it
// registers; see slot.CheckName.) JSON output carries names unchanged.
func printable(name string) string {
	if strings.HasPrefix(name, `"`) || strings.TrimSpace(name) != name || !utf8.ValidString(name) || strings.IndexFunc(name, hidden) >= 0 {
		return strconv.Quote(name)
	}
	return name
}

// hidden reports whether r would not show as itself: control and format
// characters, the line and paragraph separators, and spaces other than
// U+0020, which print like it.
func hidden(r rune) bool {
	return !unicode.IsGraphic(r) || unicode.IsSpace(r) && r != ' '
}
