package input

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxReasonLen is the longest reason, in bytes: the text stored with a
// re-open or a skip, read by people in listings and history. A KiB is a
// paragraph; anything longer belongs in a ticket the reason points to.
const MaxReasonLen = 1024

// CheckReason reports whether text can be stored as a reason (the message of
// re-opened and skipped slots): at most MaxReasonLen bytes of valid UTF-8
// without control characters other than tab and newline, and without
// invisible characters (see CheckName). The empty text is valid; callers
// substitute their default. Errors wrap ErrReason and name the text,
// abbreviated and escaped.
//
// Reasons are checked when they are given, before anything is written:
// PostgreSQL refuses invalid UTF-8 and NUL only halfway through an
// operation, and an unbounded reason would be copied onto every slot of a
// range.
func CheckReason(text string) error {
	switch {
	case len(text) > MaxReasonLen:
		return fmt.Errorf("%w %q: %d bytes; expected at most %d", ErrReason, Abbreviate(text), len(text), MaxReasonLen)
	case !utf8.ValidString(text):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrReason, Abbreviate(text))
	}
	for _, r := range text {
		switch {
		case r == '\t' || r == '\n':
		case isControl(r):
			return fmt.Errorf("%w %q: contains control character %U", ErrReason, Abbreviate(text), r)
		case isInvisible(r):
			return fmt.Errorf("%w %q: contains invisible character %U", ErrReason, Abbreviate(text), r)
		}
	}
	return nil
}

// MaxActorLen is the longest actor (who works through a client, recorded in
// the slots' history), in bytes.
const MaxActorLen = 200

// CheckActor reports whether actor can name who works through a client in
// the slots' history: one line of at most MaxActorLen bytes of valid UTF-8
// without control or invisible characters (see CheckText).
func CheckActor(actor string) error { return CheckText("actor", actor, MaxActorLen) }

// CheckText reports whether text can be stored as one line of free text of
// at most max bytes, such as the name of who re-opened a range: valid UTF-8
// without any control character (tab and newline included) and without
// invisible characters (see CheckName). what names the text in errors
// ("invalid actor …"); they wrap ErrText and show the text abbreviated and
// escaped.
func CheckText(what, text string, max int) error {
	switch {
	case len(text) > max:
		return fmt.Errorf("%w: %s %q: %d bytes; expected at most %d", ErrText, what, Abbreviate(text), len(text), max)
	case !utf8.ValidString(text):
		return fmt.Errorf("%w: %s %q: not valid UTF-8", ErrText, what, Abbreviate(text))
	}
	for _, r := range text {
		switch {
		case isControl(r):
			return fmt.Errorf("%w: %s %q: contains control character %U", ErrText, what, Abbreviate(text), r)
		case isInvisible(r):
			return fmt.Errorf("%w: %s %q: contains invisible character %U", ErrText, what, Abbreviate(text), r)
		}
	}
	return nil
}

// isControl reports whether r is a control character: C0, DEL or C1.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 }

// isInvisible reports whether r prints as nothing, or changes how the text
// around it prints: the format characters (Unicode category Cf: zero-width
// spaces and joiners, bidirectional controls, the byte order mark, the soft
// hyphen, tags) and the line and paragraph separators U+2028 and U+2029.
// Text containing them can look identical to other text: "report" and
// "report\u200b" print the same, and a right-to-left override makes what
// follows it print backwards.
func isInvisible(r rune) bool {
	return r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r)
}

// PrintableName returns name as it is safe to show a person: the name itself
// when every character shows as what it is, else the name quoted with Go
// escapes ("sensor\u200b", "\u202erosnes"). A series another tool stored
// with an invisible or control character, a space other than U+0020, a
// leading or trailing space or invalid UTF-8 thus never looks like another
// series. A name that itself starts with a double quote is quoted too, so no
// plain name reads like the quoted form of another: different names always
// print differently.
func PrintableName(name string) string {
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

// MaxNameLen is the longest series name, in bytes.
const MaxNameLen = 200

// CheckName reports whether name can name a new series: 1 to MaxNameLen
// bytes of UTF-8 without control characters (NUL cannot be stored in
// PostgreSQL text; tabs and newlines would make logs and tables ambiguous)
// and without invisible characters — format characters (Unicode category
// Cf: zero-width spaces and joiners, bidirectional controls, the byte order
// mark, the soft hyphen) and the separators U+2028 and U+2029 — so that two
// different series never print alike. Quotes, semicolons and any other
// printable character are fine: names are only ever passed to the database
// as parameters. Errors wrap ErrName and name the name, escaped.
func CheckName(name string) error {
	if err := CheckStoredName(name); err != nil {
		return err
	}
	for _, r := range name {
		if isInvisible(r) {
			return fmt.Errorf("%w %q: contains invisible character %U; a name must print as what it is", ErrName, Abbreviate(name), r)
		}
	}
	return nil
}

// CheckStoredName is what any stored series name satisfies: CheckName
// without the rule on invisible characters, which a series registered by
// another tool may contain and must stay usable with (slot.NewSeries
// applies it).
func CheckStoredName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty; expected a name such as sensor_report", ErrName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w %q: %d bytes; expected at most %d", ErrName, Abbreviate(name), len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrName, Abbreviate(name))
	}
	for _, r := range name {
		if isControl(r) {
			return fmt.Errorf("%w %q: contains control character %U", ErrName, Abbreviate(name), r)
		}
	}
	return nil
}
