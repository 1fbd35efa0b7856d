package sqlschema

// StartsOf is an SQL expression for the set of the slot starts (column
// slot_start) of the rows of rel, a CTE or table name, to test a start
// against with <@: a multirange of one point per row, built once (a sort)
// and searched by bisection, so n tests against m rows cost O((n + m) log
// m) whatever the planner estimates. It stands in for a join of two sets
// of slots, which the planner runs as a nested loop over both sides when
// it believes each holds one row (a table without statistics for them).
// The set of no rows is empty, never NULL. It needs PostgreSQL 14
// (multiranges).
func StartsOf(rel string) string {
	return `(SELECT coalesce(range_agg(tstzrange(r.slot_start, r.slot_start, '[]')), '{}') FROM ` + rel + ` r)`
}
