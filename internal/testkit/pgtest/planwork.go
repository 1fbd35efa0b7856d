package pgtest

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
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
// every row of the other shows up as the product of the two.
//
// A row tested against a whole array costs a pass over the array, which
// no row count shows: the server hashes an array only when it is a
// constant (a custom plan's argument), never a parameter of a generic
// plan nor one computed by the statement. So PlanWork also fails the test
// when a node tests each of its rows against such an array (= ANY, <> ALL
// or array_position in a filter), or looks one up again on each of its
// loops (in an index or TID condition of a node run more than once),
// unless the array is an argument of at most arrayTestAllowed elements or
// one the caller marked as PerRow.
//
// The statement runs, writes included: the caller rolls tx back. It fails
// the test on any error.
func PlanWork(tb testing.TB, tx pgx.Tx, mode, sql string, args ...any) int64 {
	tb.Helper()
	plan := explain(tb, tx, "ANALYZE, FORMAT JSON", mode, sql, args)
	plan.checkArrayTests(tb, args)
	return plan.work()
}

// PlanCost returns the planner's estimated total cost of sql with args in
// tx, with the plan cache mode mode, without running it: what the server
// compares with jit_above_cost and the other jit_* settings. It fails the
// test on any error.
func PlanCost(tb testing.TB, tx pgx.Tx, mode, sql string, args ...any) float64 {
	tb.Helper()
	return explain(tb, tx, "FORMAT JSON", mode, sql, args).TotalCost
}

// explain prepares sql in tx and returns its plan for args as EXPLAIN
// with options (FORMAT JSON among them) reports it, under the plan cache
// mode mode. Each of args is given as is, a PerRow as its array.
func explain(tb testing.TB, tx pgx.Tx, options, mode, sql string, args []any) planNode {
	tb.Helper()
	ctx := context.Background()
	values := make([]any, len(args))
	for i, a := range args {
		values[i] = a
		if p, ok := a.(PerRow); ok {
			values[i] = p.Array
		}
	}
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
			return tx.QueryRow(ctx, "EXPLAIN ("+options+") EXECUTE "+name+"("+strings.Join(params, ", ")+")",
				append([]any{pgx.QueryExecModeSimpleProtocol}, values...)...).Scan(&plan)
		},
		func() error { _, err := tx.Exec(ctx, "DEALLOCATE "+name); return err },
	} {
		if err := step(); err != nil {
			tb.Fatal(err)
		}
	}
	return plan[0].Plan
}

// PerRow marks an argument of PlanWork, an array, that the plan may test
// each row against element by element: a cost the caller accepts, and
// says why where it does.
type PerRow struct{ Array any }

// arrayTestAllowed is the longest argument array a plan may test rows
// against one by one: a handful of states, say, not a list of slots.
const arrayTestAllowed = 16

// arrayTest matches a test against the elements of a parameter's array,
// capturing the parameter's number.
var arrayTest = regexp.MustCompile(`(?:ANY|ALL) \(\$(\d+)\)|array_position\(\$(\d+)`)

// checkArrayTests fails the test for every test of the node and those
// below it against the elements of a parameter's array that is repeated
// per row or per loop (see PlanWork), args being the statement's
// arguments.
func (n planNode) checkArrayTests(tb testing.TB, args []any) {
	tb.Helper()
	conds := []string{n.Filter, n.JoinFilter}
	if n.Loops > 1 {
		conds = append(conds, n.IndexCond, n.TIDCond, n.RecheckCond)
	}
	for _, cond := range conds {
		for _, m := range arrayTest.FindAllStringSubmatch(cond, -1) {
			param, _ := strconv.Atoi(m[1] + m[2])
			if param <= len(args) {
				arg := args[param-1]
				if _, ok := arg.(PerRow); ok {
					continue
				}
				if v := reflect.ValueOf(arg); v.Kind() == reflect.Slice && v.Len() <= arrayTestAllowed {
					continue
				}
			}
			tb.Errorf("%s (%v loops) tests each row against the whole array $%d: %s", n.NodeType, n.Loops, param, cond)
		}
	}
	for _, c := range n.Plans {
		c.checkArrayTests(tb, args)
	}
}

// planNode is a node of a plan as EXPLAIN (ANALYZE, FORMAT JSON) reports
// it: its conditions, rows and removed rows per loop, and the planner's
// estimate of its total cost.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	TotalCost    float64    `json:"Total Cost"`
	Filter       string     `json:"Filter"`
	JoinFilter   string     `json:"Join Filter"`
	IndexCond    string     `json:"Index Cond"`
	TIDCond      string     `json:"TID Cond"`
	RecheckCond  string     `json:"Recheck Cond"`
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
