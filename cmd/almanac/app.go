package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/metric"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/dbtarget"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// Exit codes, a contract with scripts (the root command's help lists them).
const (
	exitOK          = 0
	exitProblem     = 1 // the operation ran and found a problem
	exitUsage       = 2 // bad input; nothing was written
	exitUnavailable = 3 // database unreachable or schema not migrated
)

// exitError carries the exit code decided where the failure is understood;
// the code is never guessed from an error's text.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error { return &exitError{exitUsage, err} }

func usagef(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }

func unavailableError(err error) error { return &exitError{exitUnavailable, err} }

// problemError marks an operation that ran to the end and found something
// wrong (gaps with --fail-on-gaps, a failed slot under --once).
func problemError(err error) error { return &exitError{exitProblem, err} }

// exitCode decides the exit code of err. Errors that carry no decision are
// classified by type: bad input from the slot model or a schema name is
// usage; a missing migration or a lost connection is "unavailable";
// anything else that happened after the command started running is a
// problem.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, almanac.ErrInvalid):
		return exitUsage
	case errors.Is(err, almanac.ErrNotMigrated), errors.Is(err, almanac.ErrUnavailable),
		errors.As(err, new(*pgconn.ConnectError)), errors.As(err, new(*net.OpError)):
		return exitUnavailable
	default:
		return exitProblem
	}
}

// defaultRetryTimeout is how long a command keeps trying a database that is
// unreachable, full or restarting before it gives up with exit status 3:
// long enough for a restart or a failover, short enough for a script.
const defaultRetryTimeout = 30 * time.Second

// app holds the global flags and the streams of one invocation.
// hostClock is this host's clock: it times what the command itself does
// (the demo's elapsed times). Cutoffs that select rows (compact
// --older-than) come from the database's clock, which every worker's
// claims and leases already follow; tests move this one to show it.
var hostClock = time.Now

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// clock is the time of the messages that depend on it (which failed
	// slots are overdue); nil means the system clock.
	clock func() time.Time

	databaseURL string
	urlFrom     string // where databaseURL came from, for error messages
	target      string // the database, user@host:port/db, once connect parsed it
	schema      string
	json        bool
	actor       string // --actor of the commands that change slots

	// started is set once a command's own code runs. An error before that
	// comes from parsing the command line (unknown command, bad flag, wrong
	// number of arguments): a usage error.
	started  bool
	pool     *pgxpool.Pool
	client   *almanac.Client // on pool, made by a.connectClient
	poolSize int32           // connections the command needs; at least 2

	// retryTimeout is the retry budget of the command's database calls,
	// read from retryText (--retry-timeout) or ALMANAC_RETRY_TIMEOUT.
	retryTimeout time.Duration
	retryText    string
	// pooler and poolerText: whether connections go through a pooler.
	pooler     almanac.Pooler
	poolerText string
	// listenURL is a direct connection for LISTEN (almanac run).
	listenURL string
	// logs is set by commands that log their work (almanac run), in
	// logFormat (text or json; default json with --json, else text) at
	// logLevel and above.
	logs      bool
	logFormat string
	logLevel  slog.Level
	levelText string
	// meters, if set, receives the client's metrics (almanac run --http).
	meters metric.MeterProvider
	// concurrency and shutdownTimeout configure the client's workers
	// (almanac run's --workers and --grace).
	concurrency     int
	shutdownTimeout time.Duration
}

// run executes the CLI with args and returns the process exit code. Its
// standard input is empty and not a terminal, so a command that asks for
// confirmation needs --yes; main uses runInput.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runInput(ctx, args, strings.NewReader(""), stdout, stderr, getenv)
}

// runInput is run with a standard input, from which a command may read a
// confirmation when it is a terminal.
func runInput(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if a.pool != nil {
		a.pool.Close()
	}
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	var ee *exitError
	if !a.started && !errors.As(err, &ee) {
		code = exitUsage
	}
	msg := "almanac: " + oneLine(err.Error())
	jsonOut, jsonLogs := outputFormats(args)
	switch {
	case a.jsonLogs():
		// almanac run's log is JSON on every line, its last one too.
		a.jsonLogger(stderr).Error(msg, "exit_code", code)
	case a.json || jsonOut:
		// Scripts that asked for JSON read the error as JSON too.
		line, _ := json.Marshal(struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}{msg, code})
		fmt.Fprintln(stderr, string(line))
	case a.logFormat == "json" || jsonLogs:
		a.jsonLogger(stderr).Error(msg, "exit_code", code)
	default:
		fmt.Fprintln(stderr, msg)
	}
	return code
}

// outputFormats reads --json and --log-format from the command line
// before (or without) cobra: the final error and the signal messages
// follow them even when the command line did not parse. jsonLogs is
// --log-format json, or --json without --log-format text.
func outputFormats(args []string) (jsonOut, jsonLogs bool) {
	format := ""
	for i, arg := range args {
		switch {
		case arg == "--":
			return jsonOut, format == "json" || format == "" && jsonOut
		case arg == "--json" || arg == "--json=true":
			jsonOut = true
		case arg == "--json=false":
			jsonOut = false
		case strings.HasPrefix(arg, "--log-format="):
			format = strings.TrimPrefix(arg, "--log-format=")
		case arg == "--log-format" && i+1 < len(args):
			format = args[i+1]
		}
	}
	return jsonOut, format == "json" || format == "" && jsonOut
}

// now returns the time by the app's clock.
func (a *app) now() time.Time {
	if a.clock != nil {
		return a.clock()
	}
	return time.Now()
}

// oneLine folds a multi-line error (PostgreSQL details, wrapped causes) onto
// one line, so scripts can read it with a single `read`.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// shown returns text read from the database (a message, an actor, a
// reason) as one line that prints as what it holds: folded as oneLine does
// (a carriage return cannot overwrite the line), then, when a character
// would not show as itself (an escape sequence, a backspace, a
// bidirectional override), quoted with Go escapes as series names are
// (input.PrintableName). Plain SQL can store anything; a terminal must
// not run it. --json prints the stored text as it is.
func shown(s string) string { return input.PrintableName(oneLine(s)) }

// rootCommand builds the command tree with cobra: nested subcommands,
// GNU-style flags, --help on every command and the "--" that separates
// `almanac run`'s own flags from the command it runs all come with it, and it
// is what Go CLIs users know (kubectl, gh, hugo). The standard flag package
// would need all of that written by hand.
func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "almanac",
		Short: "Process every interval of a time range exactly once, coordinated through PostgreSQL",
		Long: `almanac keeps a table of time slots (a name plus an ISO-8601 interval such as
2026-03-01T00:00:00Z/PT5M) in PostgreSQL and makes a fleet of workers process
each slot exactly once: it materializes slots, finds gaps, re-opens ranges for
backfills and runs commands per slot.

Database: --database-url, else DATABASE_URL, else
postgres://postgres@127.0.0.1:5432/postgres, of which PGHOST, PGPORT, PGUSER
and PGDATABASE replace their part when set (PGPASSWORD or ~/.pgpass give the
password). The demo and the tests use the same rule.

Exit codes: 0 success; 1 the operation ran and found a problem; 2 bad input
(nothing was written); 3 the database is unreachable or not migrated.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Subcommand groups print their help; unknown words are usage errors.
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.resolveGlobals(cmd)
		},
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError(suggestFlag(cmd, err)) })
	flags := root.PersistentFlags()
	flags.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL connection URL (default: $DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres)")
	flags.StringVar(&a.schema, "schema", "", "schema holding almanac's tables (default: $ALMANAC_SCHEMA, else "+sqlschema.Default+")")
	flags.BoolVar(&a.json, "json", false, "print machine-readable JSON on stdout")
	flags.StringVar(&a.poolerText, "pooler", "",
		"whether the database URL goes through a connection pooler such as PgBouncer: auto (detect), none (direct), session or transaction (default: $ALMANAC_POOLER, else auto)")
	flags.StringVar(&a.listenURL, "listen-url", "",
		"a direct connection to the server for LISTEN, when --database-url goes through a pooler in transaction mode (default: $ALMANAC_LISTEN_URL)")
	flags.StringVar(&a.logFormat, "log-format", "", "format of the log on stderr of the commands that log (almanac run, almanac serve) and of the final error: text or json (default: json with --json, else text)")
	flags.StringVar(&a.levelText, "log-level", "info", "least severe log events written: debug, info, warn or error")
	flags.StringVar(&a.retryText, "retry-timeout", "",
		"how long almanac run and serve keep trying while the database is unreachable, and every command while it is full or restarting, before exiting with status 3: "+input.DurationSyntax+" (default: $ALMANAC_RETRY_TIMEOUT, else 30s)")
	root.AddCommand(a.migrateCommand(), a.seriesCommand(),
		a.materializeCommand(), a.gapsCommand(), a.statusCommand(), a.reopenCommand(), a.retryCommand(), a.skipCommand(), a.compactCommand(),
		a.historyCommand(), a.failuresCommand(), a.runCommand(), a.serveCommand(),
		a.demoCommand())
	return root
}

// resolveGlobals applies the environment fallbacks and validates the schema
// name before any command touches the database.
func (a *app) resolveGlobals(cmd *cobra.Command) error {
	a.started = true
	a.urlFrom = "--database-url"
	if !cmd.Flags().Changed("database-url") {
		a.databaseURL, a.urlFrom = dbtarget.URL(a.getenv)
	}
	if cmd.Flags().Changed("database-url") && hasPassword(a.databaseURL) {
		a.warnPasswordFlag("database-url", "DATABASE_URL")
	}
	if !cmd.Flags().Changed("schema") {
		a.schema = a.getenv("ALMANAC_SCHEMA")
		if a.schema == "" {
			a.schema = sqlschema.Default
		}
	}
	if err := sqlschema.Check(a.schema); err != nil {
		return usageError(fmt.Errorf("--schema: %w", err))
	}
	if !cmd.Flags().Changed("pooler") {
		a.poolerText = cmp.Or(a.getenv("ALMANAC_POOLER"), almanac.PoolerAuto.String())
	}
	var err error
	if a.pooler, err = parsePooler(a.poolerText); err != nil {
		return usageError(fmt.Errorf("--pooler: %w", err))
	}
	if !cmd.Flags().Changed("listen-url") {
		a.listenURL = a.getenv("ALMANAC_LISTEN_URL")
	} else if hasPassword(a.listenURL) {
		a.warnPasswordFlag("listen-url", "ALMANAC_LISTEN_URL")
	}
	if a.listenURL != "" {
		if _, err := pgx.ParseConfig(a.listenURL); err != nil {
			return usagef("--listen-url is malformed; expected e.g. postgres://user@host:5432/dbname")
		}
	}
	a.retryTimeout = defaultRetryTimeout
	if retryFrom, text := "--retry-timeout", a.retryText; cmd.Flags().Changed("retry-timeout") || a.getenv("ALMANAC_RETRY_TIMEOUT") != "" {
		if !cmd.Flags().Changed("retry-timeout") {
			retryFrom, text = "ALMANAC_RETRY_TIMEOUT", a.getenv("ALMANAC_RETRY_TIMEOUT")
		}
		d, err := durationFlag(retryFrom, text)
		if err != nil {
			return err
		}
		if d <= 0 {
			return usagef("%s %q: expected a positive duration such as 30s", retryFrom, text)
		}
		a.retryTimeout = d
	}
	switch a.logFormat {
	case "":
		a.logFormat = "text"
		if a.json {
			a.logFormat = "json"
		}
	case "text", "json":
	default:
		return usagef("--log-format %q: expected text or json", a.logFormat)
	}
	if err := a.logLevel.UnmarshalText([]byte(a.levelText)); err != nil || !validLevel(a.levelText) {
		return usagef("--log-level %q: expected debug, info, warn or error", a.levelText)
	}
	return nil
}

// passwordInConnString finds a password in a connection string: in a URL's
// user information or query, or as a keyword/value pair.
var passwordInConnString = regexp.MustCompile(`(?i)^postgres(?:ql)?://[^/?#]*:[^/?#]*@|[?&]password=[^&]|(?:^|\s)password\s*=\s*\S`)

// hasPassword reports whether the connection string conn holds a password.
func hasPassword(conn string) bool { return passwordInConnString.MatchString(conn) }

// warnPasswordFlag warns, on one line, that the --flag given holds a
// password: a command line is not a secret.
func (a *app) warnPasswordFlag(flag, env string) {
	fmt.Fprintf(a.stderr, "almanac: warning: the password in --%s can be read by every local user (ps, /proc/%d/cmdline); set %s, PGPASSWORD or a ~/.pgpass file instead\n",
		flag, os.Getpid(), env)
}

// logger returns the log of the command: on stderr, as text or JSON lines
// (--log-format) from --log-level up, for the commands that log (almanac
// run); silent for the others, whose stdout and single stderr line are
// their interface. The client redacts passwords in the lines it writes.
func (a *app) logger() *slog.Logger {
	opts := &slog.HandlerOptions{Level: a.logLevel}
	switch {
	case !a.logs:
		return slog.New(slog.DiscardHandler)
	case a.logFormat == "json":
		return a.jsonLogger(a.stderr)
	default:
		return slog.New(slog.NewTextHandler(a.stderr, opts))
	}
}

// validLevel reports whether text names one of the four levels --log-level
// takes (slog also reads offsets such as "info+2", which are not offered).
func validLevel(text string) bool {
	switch strings.ToLower(text) {
	case "debug", "info", "warn", "error":
		return true
	}
	return false
}

// noArgs rejects positional arguments on commands that take none, as a usage
// error that names the stray word.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it applies only to its own errors
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			return usagef("unknown command %q for %q; did you mean %q? See %q", args[0], cmd.CommandPath(), s[0], cmd.CommandPath()+" --help")
		}
		return usagef("unknown command %q for %q; see %q", args[0], cmd.CommandPath(), cmd.CommandPath()+" --help")
	}
	return nil
}

// exactArgs requires n positional arguments, described by what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s expects %s, got %s; see %q", cmd.CommandPath(), what, nouns(len(args), "argument", "arguments"), cmd.CommandPath()+" --help")
		}
		return nil
	}
}

// printJSON writes v as indented JSON on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
