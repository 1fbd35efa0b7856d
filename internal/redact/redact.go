// Package redact hides passwords in text before it is stored or logged: a
// program's output or an error may quote the database URL it was given,
// and whatever almanac stores as a slot's message is readable by anyone who
// can read the table.
//
// It recognizes the two ways a password is usually written in such text:
//
//   - in a URL's user information, scheme://user:password@host, as net/url
//     reads it (the user information ends at the last "@" before the path);
//     it becomes scheme://user:REDACTED@host;
//   - as a key/value pair whose key ends in "password" or "passwd" (any
//     case: password=, sslpassword=, PGPASSWORD=, DB_PASSWORD: , "password":
//     in JSON), with a value that is single- or double-quoted (backslash
//     escapes allowed, as in libpq connection strings) or bare; either way
//     the value runs on to the next space or "&" and becomes REDACTED (in
//     JSON, that hides the rest of the object too: better too much than
//     too little).
//
// Redaction is a safety net, not a guarantee: a password printed on its own
// is not recognizable as one. So the scheduler also hands the passwords it
// connects with to its lease handlers in their context (WithPasswords),
// and a command run per slot is given no variable that holds one.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces every password found.
const Mask = "REDACTED"

var (
	urlPassword = regexp.MustCompile(`(?i)([a-z][a-z0-9+.\-]*://[^\s:/?#@]*):[^\s/?#]*@`)
	keyPassword = regexp.MustCompile(`(?i)([a-z0-9_.\-]*(?:password|passwd)"?[ \t]*[=:][ \t]*)(?:'(?:[^'\\]|\\.)*'?[^\s&]*|"(?:[^"\\]|\\.)*"?[^\s&]*|[^\s&]+)`)
)

// String returns s with every password it recognizes replaced by Mask.
// Text without "://" and without "passw" (in any case) is returned as is,
// without a copy.
func String(s string) string {
	if strings.Contains(s, "://") {
		s = urlPassword.ReplaceAllString(s, "${1}:"+Mask+"@")
	}
	if containsFold(s, "passw") {
		s = keyPassword.ReplaceAllString(s, "${1}"+Mask)
	}
	return s
}

// containsFold reports whether s contains the lower-case ASCII word w in
// any case, without allocating.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		j := 0
		for ; j < len(w); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
		}
		if j == len(w) {
			return true
		}
	}
	return false
}
