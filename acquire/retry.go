package acquire

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides what happens after a handler fails: given the number
// of failures so far (1 after the first) and the error, it returns how long
// to wait before the slot may be acquired again, or retry=false to give up
// and park the slot (AVAILABLE with not_before = 'infinity', visible in
// status and gap reports until someone re-opens or retries it).
type RetryPolicy func(failures int, err error) (delay time.Duration, retry bool)

// Exponential returns a policy that waits base·2^(failures-1), capped at
// limit, spread by ±jitter (a fraction, e.g. 0.2 for ±20 %) so that slots
// failing together do not retry in lockstep. It always retries; a
// per-series maximum of attempts parks slots (Policy.MaxAttempts).
func Exponential(base, limit time.Duration, jitter float64) RetryPolicy {
	return func(failures int, _ error) (time.Duration, bool) {
		d := float64(base) * math.Pow(2, float64(max(failures, 1)-1))
		d = math.Min(d, float64(limit))
		if jitter > 0 {
			d *= 1 + jitter*(2*rand.Float64()-1)
		}
		return time.Duration(d), true
	}
}

// DefaultRetry waits 1 s after the first failure, doubling up to 1 h, ±20 %:
// 1 s, 2 s, 4 s, ... about 17 min after the 11th failure, then 1 h.
var DefaultRetry = Exponential(time.Second, time.Hour, 0.2)
