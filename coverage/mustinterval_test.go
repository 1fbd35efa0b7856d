package coverage

import "github.com/almanacdev/almanac/slot"

// mustInterval parses an interval a test writes as a constant, panicking on
// a typo.
func mustInterval(text string) slot.Interval {
	iv, err := slot.ParseInterval(text)
	if err != nil {
		panic(err)
	}
	return iv
}
