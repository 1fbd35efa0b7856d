package almanac

import (
	"fmt"

	"github.com/almanacdev/almanac/internal/input"
)

// WithActor returns a client that works like c, on the same pool, with the
// same settings, logs and metrics, but records actor in the slots' history
// of the re-opens, skips, retries and materializations it makes, in place
// of Options.Actor: for a program that acts for several people, such as
// the coverage page, whose log-ins each name a person. The returned client
// has no jobs; c's are left alone. It is cheap: keep it for as long as the
// person acts, or make one per call. An empty actor records the database
// role, as Options.Actor does. Errors wrap ErrInvalid when actor cannot be
// stored (as Options.Actor: at most 200 bytes, one line).
func (c *Client) WithActor(actor string) (*Client, error) {
	if err := input.CheckActor(actor); err != nil {
		return nil, fmt.Errorf("actor: %w", err)
	}
	opts := c.opts
	opts.Actor = actor
	c.checked.Lock()
	poolOK := c.poolOK
	c.checked.Unlock()
	return &Client{pool: c.pool, opts: opts, listen: c.listen, covs: map[string]seriesCoverage{}, tel: c.tel, poolOK: poolOK}, nil
}
