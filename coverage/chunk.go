package coverage

import "time"

// eachChunk calls fn for consecutive sub-ranges of [from, to), which holds
// total slots, of about ChunkSize slots each (equal durations: calendar
// slots of different lengths make them differ by a few), telling it which
// is the last, and reports progress after each.
func (c *Client) eachChunk(from, to time.Time, total int64, progress func(done, total int64), fn func(p part, last bool) error) error {
	var chunks []part
	for p := range splitRange(c.grid, part{from, to, total}, ceilDiv(total, c.chunk)) {
		chunks = append(chunks, p)
	}
	for i, p := range chunks {
		if err := fn(p, i == len(chunks)-1); err != nil {
			return err
		}
		if progress != nil {
			done, _ := c.grid.Count(from, p.hi)
			progress(done, total)
		}
	}
	return nil
}
