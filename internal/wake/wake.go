// Package wake is the LISTEN/NOTIFY contract between the code that makes
// slots acquirable (materialize, re-open, retry) and idle workers: one
// notification per operation and series, never one per row, because NOTIFY
// takes a global lock at commit.
package wake

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Channel returns the notification channel of a schema. Channel names are
// identifiers of at most 63 bytes, and schema names may be that long and
// contain any character, so the channel carries a hash of the schema name
// rather than the name.
func Channel(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("almanac_%016x", h.Sum64())
}

// Event says that slots of one series may have become acquirable, or of
// any series of the schema when Name is empty (a plain SQL insert: the
// schema's statement trigger does not know which series it inserted).
type Event struct {
	Name     string `json:"name"`
	Interval string `json:"interval"`
	// Reason is what made them acquirable: "materialize", "reopen", "retry",
	// "sql" (a plain SQL statement, through the schema's triggers) and so
	// on. Listeners must not rely on it.
	Reason string `json:"reason,omitempty"`
}

// Execer is what Notify needs: a transaction, a connection or a pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Notify queues ev on schema's channel. Called inside a transaction, the
// notification is delivered when (and only if) the transaction commits, so
// a woken worker finds the change committed.
func Notify(ctx context.Context, db Execer, schema string, ev Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel(schema), string(payload))
	return err
}

// Parse decodes a notification payload.
func Parse(payload string) (Event, error) {
	var ev Event
	err := json.Unmarshal([]byte(payload), &ev)
	return ev, err
}
