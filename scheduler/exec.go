package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/redact"
	"github.com/almanacdev/almanac/internal/safetext"
	"github.com/almanacdev/almanac/internal/supervisor"
	"github.com/almanacdev/almanac/slot"
)

// defaultGrace is how long a command has to exit after SIGTERM before it
// gets SIGKILL, by default.
const defaultGrace = 10 * time.Second

const (
	// stderrTail is how much of the end of a failed command's stderr its
	// message keeps, in bytes; shownPath bounds the command's name in it.
	// With the status and acquire's "gave up after n failures: " prefix,
	// the message stays within the 4 KiB acquire stores, so the end of
	// stderr, where programs say what went wrong, is never cut off.
	stderrTail = 3072
	shownPath  = 512
	// maxLine bounds a line of output kept in memory until its newline.
	maxLine = 64 << 10
	// tailContext is how much stderr is kept before the part the message
	// shows, so that redaction sees whole a password that starts there.
	tailContext = maxLine
)

// Command runs a program once per slot: the sidecar's handler. It needs a
// Unix system; on Linux it gives the guarantees below in full.
//
// # Environment
//
// The program does not inherit the scheduler's environment, which holds
// the database URL and its password. It gets PATH, HOME, USER, LOGNAME,
// SHELL, LANG, TZ, TMPDIR and every LC_* variable of the scheduler's
// environment that is set, then Env's entries, then the slot:
//
//	ALMANAC_SERIES       series name (one sidecar may serve many series)
//	ALMANAC_NAME         series name, the same as ALMANAC_SERIES
//	ALMANAC_INTERVAL     interval, e.g. PT5M
//	ALMANAC_SLOT         slot text, e.g. 2026-03-01T10:00:00Z/PT5M
//	ALMANAC_SLOT_START   start, RFC 3339 in the series' zone
//	ALMANAC_SLOT_END     end, RFC 3339 in the series' zone
//	ALMANAC_ATTEMPT      1 for the first attempt since the slot was created or re-opened
//	ALMANAC_FENCE        fencing token of this attempt (see below)
//	ALMANAC_KEY          "<name> <slot text>", an idempotency key
//	ALMANAC_GENERATION   the slot's generation: 1, one more with every re-open
//	ALMANAC_COMPUTATION_KEY  "<name> <slot text> <generation>", a key per computation
//	ALMANAC_UPSTREAM     for a series with dependencies: the upstream slots it covers,
//	                     one per line, each "<name> <slot text> <generation>"
//	                     (the ComputationKey of Slot.Upstream's entries)
//	ALMANAC_UPSTREAM_COUNT  how many upstream slots there are
//
// ALMANAC_UPSTREAM and ALMANAC_UPSTREAM_COUNT are set only when the slot
// has upstream slots (Slot.Upstream). Names hold no newline, and the slot
// text and generation no space, so each line splits at its last two
// spaces. ALMANAC_UPSTREAM holds at most 64 KiB (about 1,400 lines of
// 45 bytes: a month of hours fits, a month of five-minute slots does not):
// past that it lists the first lines that fit, whole, and
// ALMANAC_UPSTREAM_COUNT is larger than the number of lines. A program
// that must see them all reads them from the database then. Linux refuses
// to start a program with a variable over 128 KiB.
//
// EnvAll passes the whole environment instead, except the variables that
// hold database credentials, which pass only when Env names them:
// DATABASE_URL, every ALMANAC_*_URL (ALMANAC_LISTEN_URL), every PG*
// variable, and every variable whose value holds a PostgreSQL connection
// string (postgres:// or postgresql:// anywhere in it, as in a JDBC URL,
// or one of the libpq keywords host=, hostaddr=, dbname=, password=,
// passfile=, service= at its start or after a blank) or the password of a
// connection of the scheduler (from its URL, PGPASSWORD or a password
// file; the scheduler gives it to the handler, so a LeaseHandler called
// otherwise drops only the rest).
//
// # Outcome
//
// Exit status 0 completes the slot; SkipExitCode skips it; any other status
// or a death by signal is a failure whose message is the command's name,
// its status and the last 3 KiB of its stderr. Passwords in URLs and in
// password=... pairs are replaced by REDACTED in that message and in the
// output lines copied to Stdout and Stderr. The message is redacted over
// the last 67 KiB of stderr at once, so a password is found whole however
// the output was cut into writes and lines; a line longer than 64 KiB is
// copied in pieces that end between words. The message is made
// storable: invalid UTF-8 bytes, NUL and the other control characters but
// newline and tab become U+FFFD, a carriage return a newline, and a
// character cut by the 3 KiB window is dropped, so recording the failure
// cannot fail on its content.
//
// # What dies when
//
// The program runs under a supervisor process, in a process group of its
// own. The supervisor is the running program's own binary started again,
// which a package init function turns into the supervisor before main runs
// (it adds a few to a few tens of milliseconds per run). When its lease is
// lost, its Timeout passes or the scheduler shuts down, the group gets
// SIGTERM and, Grace later, SIGKILL. When the program exits, whatever it
// left running is killed. When the scheduler's process ends in any way,
// SIGKILL included, the supervisor notices (a pipe only the scheduler holds
// closes) and kills the group at once. On Linux the supervisor is a child
// subreaper, so this reaches every descendant, also those that left the
// group (setsid, daemons), and the program gets a parent-death signal should
// the supervisor itself be killed. Should it be (by a descendant of the
// program, which runs as the same user, or by the out-of-memory killer),
// the scheduler kills the program's process group at once, and the
// failure says "the supervisor was killed (signal: killed); the command's
// process group was killed".
//
// What remains possible: on Linux, work handed to another service (a
// systemd unit, a container, a remote host) outlives the command, as does
// what left the program's process group if the supervisor itself is
// killed. On other Unix systems (macOS, the BSDs), descendants that
// left the process group survive everything, what the program leaves
// running when it exits normally is not killed, and the program can read
// the scheduler's environment (ps -E on macOS). And on every system a
// scheduler that is frozen (SIGSTOP, a paused VM) past its lease loses its
// slot to another process while its command may still be running; its
// command is stopped when the scheduler resumes and finds the lease lost.
// That is what ALMANAC_FENCE is for: every acquisition gets a larger
// token, so a system the command writes to can refuse a write that carries
// a smaller token than one it has already seen, and a stale run cannot
// overwrite a newer one.
//
// # What the program can reach
//
// Its environment (above), its arguments, and standard input, output and
// error: every other descriptor of the scheduler's process is closed on
// exec. On Linux the scheduler's process becomes non-dumpable
// (PR_SET_DUMPABLE 0) when it runs its first command, and so does the
// supervisor: a process of the same user, the program included, can no
// longer read their /proc/<pid>/environ (the database URL), mem or fd, nor
// ptrace them. That also stops core dumps of the scheduler's process, makes
// its /proc/<pid> files root's, and leaves attaching a debugger, strace or
// perf to root. Its command line (/proc/<pid>/cmdline) stays readable by
// every local user. For a boundary that holds against everything a user
// can do (signals, files the user can read), run the program as another
// user.
type Command struct {
	// Path is the program: a path (relative to Dir), or a name looked up
	// in the program's PATH.
	Path string
	Args []string
	// Env adds to the program's environment: "NAME=value" sets NAME, and a
	// bare "NAME" passes the scheduler's own NAME if it is set, secrets
	// included (naming a variable is the opt-in). Later entries win. NAME
	// is made of ASCII letters, digits and underscores, does not start with
	// a digit, and is not one of the slot's variables; a value holds no
	// NUL byte.
	Env []string
	// EnvAll passes the scheduler's whole environment except the database
	// credentials that Env does not name (see above).
	EnvAll bool
	// Dir is the working directory; empty means the current one.
	Dir string
	// SkipExitCode marks the slot SKIP. Zero means 99, a status unused by
	// shells (126, 127, 128+n) and by the sysexits conventions (64–78).
	SkipExitCode int
	// Timeout bounds one run; past it the program is stopped as on lease
	// loss and the run is a failure. Zero means no limit: the lease is kept
	// alive for as long as the program runs, hung or not.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL. Zero means 10 s.
	Grace time.Duration
	// Stdout and Stderr receive the program's output, each line prefixed
	// with the slot ("[name 2026-03-01T10:00:00Z/PT5M] ") and passwords
	// redacted. Nil discards it.
	Stdout, Stderr io.Writer
}

// Check reports whether the command can run at all, so that a program
// refuses a mistake before it claims a slot: Env's entries must pass
// the rules of Command.Env, and Path must resolve, as a shell in Dir with the command's
// PATH would resolve it, to an executable file (a script's interpreter
// too). Errors wrap almanac.ErrInvalid (a bad Env entry) or
// almanac.ErrCannotStart (a Path that cannot be started) and quote the bad
// value.
// On Windows it returns an error wrapping errors.ErrUnsupported.
func (c Command) Check() error {
	for _, e := range c.Env {
		if err := checkEnv(e); err != nil {
			return err
		}
	}
	_, err := supervisor.LookPath(c.Path, c.Dir, lookupEnv(c.environ(nil), "PATH"))
	return err
}

// LeaseHandler returns the handler that runs the command for a slot.
func (c Command) LeaseHandler() acquire.LeaseHandler {
	if c.SkipExitCode == 0 {
		c.SkipExitCode = defaults.SkipExitCode
	}
	if c.Grace <= 0 {
		c.Grace = defaultGrace
	}
	var mu sync.Mutex // one line at a time on the shared outputs
	return func(ctx context.Context, l *acquire.Lease) error { return c.run(ctx, l, &mu) }
}

func (c Command) run(ctx context.Context, l *acquire.Lease, mu *sync.Mutex) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Timeout, fmt.Errorf("timed out after %s", c.Timeout))
		defer cancel()
	}
	name := safetext.Head(c.Path, shownPath)
	env := append(c.environ(redact.Passwords(ctx)), slotEnv(l.Slot)...)
	path, err := supervisor.LookPath(c.Path, c.Dir, lookupEnv(env, "PATH"))
	if err != nil {
		return err // it was there when the scheduler started
	}
	prefix := "[" + l.Name + " " + l.Slot.Slot.String() + "] "
	tail := &tailBuffer{max: stderrTail}
	stdout := &lineWriter{w: c.Stdout, prefix: prefix, mu: mu}
	stderr := &lineWriter{w: c.Stderr, prefix: prefix, mu: mu, tail: tail}
	p, err := supervisor.Start(supervisor.Spec{
		Path: path, Args: append([]string{c.Path}, c.Args...), Env: env, Dir: c.Dir, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan ended, 1)
	go func() {
		st, err := p.Wait()
		done <- ended{st, err}
	}()
	var end ended
	select {
	case end = <-done:
	case <-ctx.Done():
		end = c.stop(p, done)
		stdout.flush()
		stderr.flush()
		// The cause says why: lease lost, timeout or shutdown.
		return fmt.Errorf("%w (command stopped: %s)%s", context.Cause(ctx), end, tail.suffix())
	}
	stdout.flush()
	stderr.flush()
	switch {
	case end.err != nil:
		return fmt.Errorf("%s: %w%s", name, end.err, tail.suffix())
	case end.status.Code == 0:
		return nil
	case end.status.Code == c.SkipExitCode:
		return acquire.Skip(fmt.Sprintf("%s exited with %d%s", name, c.SkipExitCode, tail.suffix()))
	default:
		return fmt.Errorf("%s: %s%s", name, end.status, tail.suffix())
	}
}

// ended is how a supervised command ended.
type ended struct {
	status supervisor.Status
	err    error
}

func (e ended) String() string {
	if e.err != nil {
		return e.err.Error()
	}
	return e.status.String()
}

// stop ends the command: SIGTERM to its process group, then SIGKILL to
// everything after the grace period.
func (c Command) stop(p *supervisor.Process, done <-chan ended) ended {
	p.Terminate()
	grace := time.NewTimer(c.Grace)
	defer grace.Stop()
	select {
	case e := <-done:
		return e
	case <-grace.C:
		p.Kill()
		return <-done
	}
}

func slotEnv(s acquire.Slot) []string {
	env := []string{
		"ALMANAC_SERIES=" + s.Name,
		"ALMANAC_NAME=" + s.Name,
		"ALMANAC_INTERVAL=" + s.Interval.String(),
		"ALMANAC_SLOT=" + s.Slot.String(),
		"ALMANAC_SLOT_START=" + slot.FormatTime(s.Start),
		"ALMANAC_SLOT_END=" + slot.FormatTime(s.End),
		"ALMANAC_ATTEMPT=" + strconv.Itoa(s.Attempt),
		"ALMANAC_FENCE=" + strconv.FormatInt(s.Fence, 10),
		"ALMANAC_GENERATION=" + strconv.FormatInt(s.Generation, 10),
		"ALMANAC_KEY=" + s.Key(),
		"ALMANAC_COMPUTATION_KEY=" + s.ComputationKey(),
	}
	if len(s.Upstream) > 0 {
		env = append(env, "ALMANAC_UPSTREAM="+upstreamList(s.Upstream, maxUpstreamEnv),
			"ALMANAC_UPSTREAM_COUNT="+strconv.Itoa(len(s.Upstream)))
	}
	return env
}

// maxUpstreamEnv bounds ALMANAC_UPSTREAM's value, in bytes: half the
// longest environment string Linux accepts (MAX_ARG_STRLEN, 128 KiB), so
// that the variable never stops the command from starting.
const maxUpstreamEnv = 64 << 10

// upstreamList returns the computation keys of ups, one per line, as many
// whole lines as fit in max bytes.
func upstreamList(ups []acquire.Slot, max int) string {
	var b strings.Builder
	for _, u := range ups {
		k := u.ComputationKey()
		sep := 0
		if b.Len() > 0 {
			sep = 1
		}
		if b.Len()+sep+len(k) > max {
			break
		}
		if sep > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
	}
	return b.String()
}

// lineWriter writes whole lines, passwords redacted, to w, each prefixed,
// and to tail. Partial lines wait for their newline (or flush) up to
// maxLine bytes.
type lineWriter struct {
	w      io.Writer // nil: discard
	prefix string
	mu     *sync.Mutex
	tail   *tailBuffer // nil: none
	buf    []byte
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	if lw.tail != nil {
		lw.tail.write(p)
	}
	if lw.w == nil {
		return len(p), nil
	}
	lw.buf = append(lw.buf, p...)
	for {
		i := bytes.IndexByte(lw.buf, '\n')
		if i < 0 {
			break
		}
		lw.emit(lw.buf[:i+1])
		lw.buf = lw.buf[i+1:]
	}
	if len(lw.buf) > maxLine {
		// Pass the unfinished line on in pieces, each ending between
		// words, so that a URL reaches redaction in one piece.
		end := pieceEnd(lw.buf)
		lw.emit(append(slices.Clip(lw.buf[:end]), '\n'))
		lw.buf = lw.buf[end:]
	}
	return len(p), nil
}

// pieceEnd returns where a piece of the over-long line ends: after its last
// run of blanks that does not separate a key from its value ("password =
// x"), or at its end if there is none.
func pieceEnd(line []byte) int {
	for end := len(line); ; {
		last := bytes.LastIndexAny(line[:end], " \t")
		first := last
		for first > 0 && (line[first-1] == ' ' || line[first-1] == '\t') {
			first--
		}
		switch {
		case first <= 0:
			return len(line)
		case line[first-1] != '=' && line[first-1] != ':' && last+1 < len(line) && line[last+1] != '=' && line[last+1] != ':':
			return last + 1
		}
		end = first
	}
}

func (lw *lineWriter) flush() {
	if len(lw.buf) > 0 {
		lw.emit(append(lw.buf, '\n'))
		lw.buf = nil
	}
}

func (lw *lineWriter) emit(line []byte) {
	text := redact.String(string(line))
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, _ = io.WriteString(lw.w, lw.prefix+text)
}

// tailBuffer keeps the end of a stream as it was written: the last max
// bytes, which the message shows, and tailContext bytes before them.
// Redaction runs over all of it at once, so a password is found whole
// however the stream was cut into writes and lines.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped bool // the stream's first bytes are no longer in buf
}

func (t *tailBuffer) write(p []byte) {
	t.buf = append(t.buf, p...)
	// Dropping the front only once twice the kept size is reached moves
	// each byte at most once.
	if keep := t.max + tailContext; len(t.buf) > 2*keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-keep:]...)
		t.dropped = true
	}
}

// suffix is ": " and the end of the stream, passwords redacted, storable,
// or "" if there is none.
func (t *tailBuffer) suffix() string {
	text, dropped := t.buf, t.dropped
	if keep := t.max + tailContext; len(text) > keep {
		text, dropped = text[len(text)-keep:], true
	}
	if dropped {
		// The kept bytes begin inside a line, maybe inside a password:
		// begin at the next line, else the next word, before the part
		// the message shows.
		context := text[:max(len(text)-t.max, 0)]
		if i := bytes.IndexByte(context, '\n'); i >= 0 {
			text = text[i+1:]
		} else if i := bytes.IndexAny(context, " \t"); i >= 0 {
			text = text[i+1:]
		}
	}
	tail := strings.TrimSpace(safetext.Tail([]byte(redact.String(string(text))), t.max))
	if tail == "" {
		return ""
	}
	return ": " + tail
}
