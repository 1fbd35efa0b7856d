package web

import (
	"context"
	"sync"
	"time"

	"github.com/almanacdev/almanac"
)

// maxCached bounds the calendars a cache keeps; past it, the cache starts
// over (an operator looks at a handful of views at a time).
const maxCached = 256

// cache keeps computed calendars for a short while: the calendar of a
// whole series of millions of slots reads every row of it, so the views an
// operator (or several, or a refreshing dashboard) returns to within
// seconds are answered from memory. Concurrent requests for the same view
// share one computation. Errors are not kept.
type cache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]*cached
}

type cached struct {
	done chan struct{} // closed when h and err are set
	at   time.Time     // when the computation started
	h    almanac.Heatmap
	err  error
}

func newCache(ttl time.Duration) *cache { return &cache{ttl: ttl, m: map[string]*cached{}} }

// get returns the calendar of key, computed by load unless a computation
// younger than the cache's lifetime exists, and when it was computed.
func (c *cache) get(ctx context.Context, key string, load func() (almanac.Heatmap, error)) (almanac.Heatmap, time.Time, error) {
	now := time.Now()
	if c.ttl <= 0 {
		h, err := load()
		return h, now, err
	}
	c.mu.Lock()
	e := c.m[key]
	if e == nil || now.Sub(e.at) > c.ttl {
		if len(c.m) >= maxCached {
			c.m = map[string]*cached{}
		}
		e = &cached{done: make(chan struct{}), at: now}
		c.m[key] = e
		c.mu.Unlock()
		e.h, e.err = load()
		if e.err != nil {
			c.forget(key, e)
		}
		close(e.done)
		return e.h, e.at, e.err
	}
	c.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		return almanac.Heatmap{}, now, ctx.Err()
	}
	if e.err != nil {
		// Another request's failure (its context may have ended): try
		// again for this one.
		h, err := load()
		return h, now, err
	}
	return e.h, e.at, nil
}

func (c *cache) forget(key string, e *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] == e {
		delete(c.m, key)
	}
}

// clear drops every calendar, after an action changed slots.
func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = map[string]*cached{}
}
