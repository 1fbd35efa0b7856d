package almanac

import (
	"context"
	"testing"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/slot"
)

// BenchmarkObserveSlot measures what telling about one slot costs a worker
// (claim, span, outcome, counters) with the defaults: a discarded log and
// no-op providers. It must not allocate for the log.
func BenchmarkObserveSlot(b *testing.B) {
	e := newEngine(nil, Options{}, nil)
	grid, err := slot.NewSeries("bench", mustInterval("PT1M"), time.UTC, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	j := &job{Job: Job{Series: grid}}
	j.seriesAttrs("00000000-0000-0000-0000-000000000001")
	sl := acquire.Slot{Name: "bench", Fence: 1, Attempt: 1, Generation: 1,
		Slot: slot.Slot{Start: time.Unix(0, 0).UTC(), End: time.Unix(60, 0).UTC(), Interval: grid.Interval()}}
	res := acquire.Result{Slot: sl, Outcome: acquire.Completed, Duration: time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span := e.claimed(ctx, j, sl, time.Now(), true)
		endSpan(span, nil)
		e.record(j, res)
	}
}
