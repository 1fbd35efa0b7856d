package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/almanacdev/almanac/internal/input"
)

// durationFlag reads the duration flag (or variable) named from, as every
// command reads durations (input.ParseDuration): otherwise a usage error
// naming the flag and the text, `--lag "1.5d": expected ...`.
func durationFlag(from, text string) (time.Duration, error) {
	d, err := input.ParseDuration(text)
	if err != nil {
		why := strings.TrimPrefix(err.Error(), fmt.Sprintf("%s %q: ", input.ErrDuration, input.Abbreviate(text)))
		return 0, usageError(fmt.Errorf("%s %q: %s%w", from, input.Abbreviate(text), why, errorsOnly{err}))
	}
	return d, nil
}
