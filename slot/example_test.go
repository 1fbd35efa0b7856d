package slot_test

import (
	"fmt"
	"time"

	"github.com/almanacdev/almanac/slot"
)

// Daily slots in Berlin around the switch to summer time: the day of the
// switch lasts 23 hours, and every slot starts at local midnight.
func Example() {
	berlin, err := slot.LoadZone("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	day, err := slot.ParseInterval("P1D")
	if err != nil {
		panic(err)
	}
	days, err := slot.NewSeries("billing", day, berlin, time.Time{})
	if err != nil {
		panic(err)
	}
	from := time.Date(2026, 3, 28, 0, 0, 0, 0, berlin)
	for s := range days.Slots(from, from.AddDate(0, 0, 3)) {
		fmt.Println(s, s.Duration())
	}
	// Output:
	// 2026-03-28T00:00:00+01:00/P1D 24h0m0s
	// 2026-03-29T00:00:00+01:00/P1D 23h0m0s
	// 2026-03-30T00:00:00+02:00/P1D 24h0m0s
}

// The slot that contains an instant, and the next one, on a grid of
// fifteen minutes whose origin is five past the hour: slots start at :05,
// :20, :35 and :50.
func ExampleSeries_Floor() {
	origin := time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC)
	quarter, err := slot.ParseInterval("PT15M")
	if err != nil {
		panic(err)
	}
	quarters, err := slot.NewSeries("meter", quarter, time.UTC, origin)
	if err != nil {
		panic(err)
	}
	s, err := quarters.Floor(time.Date(2026, 5, 4, 10, 7, 30, 0, time.UTC))
	if err != nil {
		panic(err)
	}
	next, _ := quarters.Next(s)
	fmt.Println(s)
	fmt.Println(next)
	fmt.Println(s.Contains(time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)))
	// Output:
	// 2026-05-04T10:05:00Z/PT15M
	// 2026-05-04T10:20:00Z/PT15M
	// false
}

// Intervals are ISO 8601 durations; calendar parts follow the calendar.
func ExampleParseInterval() {
	for _, text := range []string{"PT5M", "P1M", "P1DT12H", "5 minutes"} {
		iv, err := slot.ParseInterval(text)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(iv)
	}
	// Output:
	// PT5M
	// P1M
	// P1DT12H
	// error: invalid interval "5 minutes": does not start with P; expected an ISO-8601 duration such as PT5M, PT1H, P1D, P1W or P1M
}
