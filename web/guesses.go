package web

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Guesses of a token (a failed login, a wrong bearer token) are limited per
// client address and in all: each address may make guessBurst at once,
// then one per guessEvery; all addresses together allBurst, then one per
// allEvery. A right token is not counted. Even a short token then takes
// years to find by trying, and a flood of guesses costs the server nothing
// but refusals. Behind a proxy every client shares the proxy's address.
const (
	guessBurst = 10
	guessEvery = 6 * time.Second
	allBurst   = 50
	allEvery   = 200 * time.Millisecond
	// maxAddresses bounds the addresses tracked; past it, addresses not
	// tracked are limited only by the limit of all.
	maxAddresses = 10_000
)

// rate is a token bucket's shape: burst tries at once, then one per every.
type rate struct {
	burst float64
	every time.Duration
}

// bucket is the tries spent from a bucket, as of at; the zero value is a
// full bucket.
type bucket struct {
	spent float64
	at    time.Time
}

// settle refills b up to now.
func (b *bucket) settle(r rate, now time.Time) {
	if !b.at.IsZero() {
		b.spent = max(0, b.spent-float64(now.Sub(b.at))/float64(r.every))
	}
	b.at = now
}

// wait is how long until b has a try left (0: it has one).
func (b *bucket) wait(r rate) time.Duration {
	if b.spent+1 <= r.burst {
		return 0
	}
	return time.Duration((b.spent + 1 - r.burst) * float64(r.every))
}

// guesses limits the tries of tokens.
type guesses struct {
	now        func() time.Time
	one, whole rate
	mu         sync.Mutex
	all        bucket
	by         map[string]*bucket
}

func newGuesses(now func() time.Time) *guesses {
	return &guesses{now: now, one: rate{guessBurst, guessEvery}, whole: rate{allBurst, allEvery}, by: map[string]*bucket{}}
}

// take spends a try of addr (a request's RemoteAddr). When none is left it
// returns how long to wait and whether the client's own address (rather
// than the limit of all) is what ran out; otherwise a refund to call if
// the token was right.
func (g *guesses) take(remote string) (refund func(), wait time.Duration, own bool) {
	key := addressKey(remote)
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all.settle(g.whole, now)
	b := g.by[key]
	if b == nil {
		if len(g.by) >= maxAddresses {
			g.forgetRefilled(now)
		}
		if len(g.by) < maxAddresses {
			b = &bucket{}
			g.by[key] = b
		}
	}
	if b != nil {
		b.settle(g.one, now)
		if w := b.wait(g.one); w > 0 {
			return nil, w, true
		}
	}
	if w := g.all.wait(g.whole); w > 0 {
		return nil, w, false
	}
	g.all.spent++
	if b != nil {
		b.spent++
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.all.spent = max(0, g.all.spent-1)
		if b != nil {
			b.spent = max(0, b.spent-1)
		}
	}, 0, false
}

// forgetRefilled drops the addresses whose buckets are full again.
func (g *guesses) forgetRefilled(now time.Time) {
	for k, b := range g.by {
		if b.settle(g.one, now); b.spent == 0 {
			delete(g.by, k)
		}
	}
}

// addressKey is the client a remote address stands for: the IPv4 address,
// or the /64 network of an IPv6 address (one host usually has a whole one).
func addressKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
