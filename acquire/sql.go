package acquire

import (
	"embed"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/wake"
)

// sqlFiles holds the queue's statements, one per file of sql/, and the
// fragments they share (sql/fragments.sql). Each file says what its
// positional parameters are. Every statement is scoped to one series
// ($1 name, $2 interval) and relies on the database clock only.
//
// The files are text/template templates, rendered once per queue (New):
// their data is the schema (.schema, quoted), the order AVAILABLE slots
// are taken in (.order) and the locked-mode transaction's settings (see
// locked_begin.sql); the functions are those of sqlFuncs. Comment lines
// (starting with --) are dropped when the files are loaded, so what is
// sent to the server is the statement alone.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the queue's SQL, rendered for its schema and options.
type statements struct {
	// The claims of lease mode and the selections of locked mode, by
	// controls.variant: with the cap's admission (capped), and with the
	// test of upstream series (upstream) or without it.
	claim, selectLocked [4]string
	lockedBegin,
	selectAcross,
	finishLocked,
	finishOne,
	extend,
	complete,
	completeTx,
	completeMany,
	fail,
	skip,
	snooze,
	release,
	checkpoint,
	landed,
	releaseOrphans,
	eject,
	failOutOfBand,
	draw,
	lower,
	// The admission of a series with a cap (see selectCapped), and the
	// read of the controls that choose the claim statements.
	lockSeries,
	takePermits,
	countPermits,
	readControls,
	readCapValue string
}

// sqlFuncs are the functions the statements' templates call.
var sqlFuncs = template.FuncMap{
	// set returns a copy of the data with the given key-value pairs
	// added: the parameters a fragment takes from the statement using it
	// (for candidates: lag, grace, lo and hi).
	"set": func(data map[string]any, kv ...string) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("set: odd number of arguments %q", kv)
		}
		out := maps.Clone(data)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out, nil
	},

	// at subscripts an array of a batch's outcomes (in a relation v, with
	// the batch's slot starts sorted in v.slot_start) at the position of
	// the row s being written: a bisection of the starts, as their array
	// is sorted.
	"at": func(array string) string {
		return array + `[width_bucket(s.slot_start, v.slot_start)]`
	},

	// notBefore turns a delay in microseconds into the next acquirable
	// time on the database clock: NULL for none, 'infinity' for a negative
	// delay (the slot is parked).
	"notBefore": func(delay string) string {
		return strings.ReplaceAll(`CASE WHEN %s IS NULL THEN NULL
        WHEN %s < 0 THEN 'infinity'::timestamptz
        ELSE clock_timestamp() + %s * interval '1 microsecond' END`, "%s", delay)
	},

	// notWaiting and expired are the tests of an acquirable slot that
	// wake.Ready shares (see candidates).
	"notWaiting": func() string { return wake.NotWaiting },
	"expired":    wake.Expired,

	"fencesIn":    fencesIn,
	"lockedRows":  lockedRows,
	"startsOf":    sqlschema.StartsOf,
	"currentXact": func() string { return retry.CurrentXact },
}

// fencesIn is an SQL expression for the set of the fences in param, a
// bigint[] parameter, to test a fence against with <@: a multirange of one
// point per fence, built once (a sort) and searched by bisection, so a
// test per row costs O(log n) whatever the plan. Testing against the
// array itself (= ANY, <> ALL, array_position) costs a pass over it per
// row whenever the server cannot hash it, which it never does for a
// parameter of a generic plan. The set of no fences is empty, never NULL.
//
// A fence stands for its slot too: it is taken from fence_seq once, by
// the claim of one slot (a lease's, an ejection's or a locked-mode
// batch's), and a row only ever carries a fence taken for it (locked
// mode's final write and a failure recorded out of band write back the
// one their own claim took). So a row whose fence is in a list of fences
// given for slots is the row that fence was given for, without pairing
// the two lists.
func fencesIn(param string) string {
	return `(SELECT coalesce(range_agg(int8range(f, f, '[]')), '{}') FROM unnest(` + param + `::bigint[]) AS f)`
}

// lockedRows is the condition by which an UPDATE of the slot table (alias
// s) takes the rows that rel, a CTE of the same statement, has just found
// and locked (with their ctid and slot_start): by their addresses (ctid),
// the versions the locking returned. That is a TID scan per row, not
// another descent of the primary key per slot, which was a third of a
// claim's work with eight workers claiming (1,874 of 2,918 buffer reads in
// one claim of 100).
//
// The other way the planner may take, when it expects many rows, is to
// hash them with a scan of the series; the bounds by rel's first and last
// starts keep that scan to the part of the series they span. Taking the
// rows by an array of their addresses (ctid = ANY) made the TID scan the
// only plan, but when the planner joined the rows back one by one (for the
// values the update returns), it also tested each against the whole array,
// so that a claim's cost grew with the square of its slots in a generic
// plan, and a takeover's in any plan; TestLeaseListsScaleWithLeases holds
// the cost linear (docs/design/plan-stable-sql.md, rule 8).
//
// A row whose newest version was committed after the statement began (and
// still passed the recheck when it was locked) is not visible to the
// update's scan and is left out; the next statement takes it. The series
// is tested too, so that every statement names its series (a sharded
// table routes by it).
func lockedRows(rel string) string {
	return `s.ctid = ` + rel + `.ctid AND s.name = $1 AND s."interval" = $2 AND s.slot_start = ` + rel + `.slot_start
  AND s.slot_start >= (SELECT min(slot_start) FROM ` + rel + `) AND s.slot_start <= (SELECT max(slot_start) FROM ` + rel + `)`
}

// sqlTemplates are the files of sql/, parsed once.
var sqlTemplates = func() *template.Template {
	t := template.New("").Funcs(sqlFuncs).Option("missingkey=error")
	files, err := sqlFiles.ReadDir("sql")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		text, err := sqlFiles.ReadFile("sql/" + f.Name())
		if err != nil {
			panic(err)
		}
		template.Must(t.New(f.Name()).Parse(commentLine.ReplaceAllString(string(text), "")))
	}
	return t
}()

// commentLine matches a line that is an SQL comment only, with its end.
var commentLine = regexp.MustCompile(`(?m)^[ \t]*--.*(\n|$)`)

// statementKey is what the rendered statements depend on.
type statementKey struct {
	schema      string
	newestFirst bool
	deadMan     time.Duration
}

// rendered holds the statements rendered so far, by statementKey: a
// process with thousands of queues (one per series) shares a few sets of
// statements instead of holding tens of kilobytes of SQL per queue. It
// keeps one entry per schema and options used, for the life of the
// process.
var rendered sync.Map // statementKey → *statements

// statementsFor returns the statements for schema and the options,
// rendered once per process.
func statementsFor(schema string, newestFirst bool, deadMan time.Duration) *statements {
	k := statementKey{schema, newestFirst, deadMan}
	if st, ok := rendered.Load(k); ok {
		return st.(*statements)
	}
	st := renderStatements(schema, newestFirst, deadMan)
	actual, _ := rendered.LoadOrStore(k, &st)
	return actual.(*statements)
}

// renderStatements renders the statements for schema, the order of
// Policy.NewestFirst and the dead-man switch deadMan (Policy.DeadMan).
func renderStatements(schema string, newestFirst bool, deadMan time.Duration) statements {
	// The NULLS clause matches slot_available_idx (see candidates).
	order := "ASC NULLS FIRST"
	if newestFirst {
		order = "DESC NULLS LAST"
	}
	data := map[string]any{
		"schema": sqlschema.Quote(schema),
		"order":  order,
		// The server notices a vanished client host within the dead-man
		// switch too: keepalives from half of it, every sixth of it, and
		// unacknowledged data for no longer than it.
		"deadManMs":         deadMan.Milliseconds(),
		"keepaliveIdle":     max(1, int(deadMan.Seconds()/2)),
		"keepaliveInterval": max(1, int(deadMan.Seconds()/6)),
		"capped":            false,
		"permitsInline":     false,
		"upstream":          false,
	}
	r := func(name string) string { return render(name, data) }
	st := statements{
		countPermits:   r("count_permits"),
		lockSeries:     r("lock_series"),
		takePermits:    r("take_permits"),
		readControls:   r("read_controls"),
		readCapValue:   r("read_cap_value"),
		lockedBegin:    r("locked_begin"),
		selectAcross:   r("select_across"),
		finishLocked:   r("finish_locked"),
		finishOne:      r("finish_one"),
		extend:         r("extend"),
		complete:       r("complete"),
		completeTx:     r("complete_tx"),
		completeMany:   r("complete_many"),
		fail:           r("fail"),
		skip:           r("skip"),
		snooze:         r("snooze"),
		release:        r("release"),
		checkpoint:     r("checkpoint"),
		landed:         r("landed"),
		releaseOrphans: r("release_orphans"),
		eject:          r("eject"),
		failOutOfBand:  r("fail_out_of_band"),
		draw:           r("draw"),
		lower:          r("lower"),
	}
	for v := range len(st.claim) {
		c := controls{capped: v&1 != 0, upstream: v&2 != 0}
		d := maps.Clone(data)
		d["capped"], d["upstream"] = c.capped, c.upstream
		// A capped lease claim counts the permits held itself; a capped
		// locked-mode selection is given the count ($10, see
		// selectCapped).
		st.selectLocked[c.variant()] = render("select_locked", d)
		d["permitsInline"] = c.capped
		st.claim[c.variant()] = render("claim", d)
	}
	return st
}

// render renders the statement of the file name.sql with data.
func render(name string, data map[string]any) string {
	var b strings.Builder
	if err := sqlTemplates.ExecuteTemplate(&b, name+".sql", data); err != nil {
		panic(err) // the templates are fixed, and every queue a test opens renders them all
	}
	return strings.TrimSpace(b.String())
}
