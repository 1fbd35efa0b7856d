package pgtest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// planWorkStatements names the statements PlanWork prepares, so that one
// left behind by a failed test never collides with the next.
var planWorkStatements atomic.Int64

// PlanWork runs sql with args under EXPLAIN ANALYZE in tx, with the plan
// cache mode mode (force_custom_plan or force_generic_plan), and returns
// the rows every node of the plan produced or filtered out, over all its
// loops: the work of the statement in rows, which the server counts the
// same on any machine. A plan that compares every row of one side with
// every row of the other shows up as the product of the two. The statement
// runs, writes included: the caller rolls tx back. It fails the test on
// any error.
func PlanWork(tb testing.TB, tx pgx.Tx, mode, sql string, args ...any) int64 {
	tb.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("plan_work_%d", planWorkStatements.Add(1))
	params := make([]string, len(args))
	for i := range args {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	var plan []struct{ Plan planNode }
	for _, step := range []func() error{
		func() error {
			_, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode)
			return err
		},
		func() error { _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+sql); return err },
		func() error {
			// EXECUTE takes its arguments as SQL text: the server does not
			// describe the parameters of a utility statement, so pgx puts
			// them in as literals.
			return tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+name+"("+strings.Join(params, ", ")+")",
				append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&plan)
		},
		func() error { _, err := tx.Exec(ctx, "DEALLOCATE "+name); return err },
	} {
		if err := step(); err != nil {
			tb.Fatal(err)
		}
	}
	return plan[0].Plan.work()
}

// planNode is a node of a plan as EXPLAIN (ANALYZE, FORMAT JSON) reports
// it: rows and removed rows per loop.
type planNode struct {
	Rows         float64    `json:"Actual Rows"`
	Loops        float64    `json:"Actual Loops"`
	Filtered     float64    `json:"Rows Removed by Filter"`
	JoinFiltered float64    `json:"Rows Removed by Join Filter"`
	Plans        []planNode `json:"Plans"`
}

// work is the rows the node and those below it produced or removed, over
// all their loops.
func (n planNode) work() int64 {
	w := int64((n.Rows + n.Filtered + n.JoinFiltered) * n.Loops)
	for _, c := range n.Plans {
		w += c.work()
	}
	return w
}
