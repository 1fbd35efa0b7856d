package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/migrations"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create, inspect, remove or print almanac's schema",
		Long: `Manage almanac's tables in the schema given by --schema (default almanac).

Migrations are versioned SQL files embedded in the binary. Each runs in its own
transaction holding a lock on the version table, so several processes may
migrate at once.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.migrateUpCommand(), a.migrateDownCommand(), a.migrateStatusCommand(), a.migrateSQLCommand(), a.migrateGrantsCommand())
	return cmd
}

type migrateResult struct {
	Schema  string `json:"schema"`
	Applied []int  `json:"applied,omitempty"`
	Undone  []int  `json:"undone,omitempty"`
	Version int    `json:"version"`
}

func (a *app) migrateUpCommand() *cobra.Command {
	var to int
	cmd := &cobra.Command{
		Use:   "up [--to N]",
		Short: "Apply every pending migration (safe to run repeatedly and concurrently)",
		Long: `Apply the pending migrations, each in its own transaction. With --to N, only
those up to version N: a staged upgrade (migrate to N, deploy the version of
almanac that needs it, then migrate up the rest).`,
		Example: `  almanac migrate up
  almanac migrate up --to 3`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var upTo []int
			if cmd.Flags().Changed("to") {
				if to < 1 || to > len(migrations.All()) {
					return usagef("--to %d: expected a version from 1 to %d", to, len(migrations.All()))
				}
				upTo = []int{to}
			}
			c, err := a.connectClient(cmd.Context())
			if err != nil {
				return err
			}
			applied, err := c.Migrate(cmd.Context(), upTo...)
			if err != nil {
				return fmt.Errorf("migrate up: %w", err)
			}
			res := migrateResult{Schema: a.schema, Applied: applied, Version: len(migrations.All())}
			if len(upTo) == 1 {
				if res.Version, err = a.schemaVersion(cmd.Context(), c); err != nil {
					return fmt.Errorf("migrate up: %w", err)
				}
			}
			if a.json {
				return a.printJSON(res)
			}
			if len(applied) == 0 {
				fmt.Fprintf(a.stdout, "schema %q in %s is up to date (version %d)\n", a.schema, a.target, res.Version)
				return nil
			}
			for _, v := range applied {
				fmt.Fprintf(a.stdout, "applied %s\n", migrationName(v))
			}
			fmt.Fprintf(a.stdout, "schema %q in %s is at version %d\n", a.schema, a.target, res.Version)
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "apply the migrations up to this version only (default: all)")
	return cmd
}

// schemaVersion returns the highest version applied to the schema.
func (a *app) schemaVersion(ctx context.Context, c *almanac.Client) (int, error) {
	states, err := c.Migrations(ctx)
	if err != nil {
		return 0, err
	}
	v := 0
	for _, m := range states {
		if !m.AppliedAt.IsZero() {
			v = m.Version
		}
	}
	return v, nil
}

func (a *app) migrateDownCommand() *cobra.Command {
	var to int
	var yes, dryRun, discard bool
	cmd := &cobra.Command{
		Use:   "down [--to N] [--discard] (--yes | --dry-run)",
		Short: "Undo migrations; by default all of them, which deletes every series and slot",
		Long: `Undo applied migrations newer than --to, newest first. With the default --to 0
everything almanac created in the schema is dropped, all series and slots
included, and the schema itself when nothing else is left in it.

This cannot be undone. On a terminal, down says what it will drop and asks you
to type yes; otherwise (a script, a pipe) it needs --yes. --dry-run prints the
SQL it would run and changes nothing.

Going below version 3 is refused while compacted ranges exist (almanac
compact): their finished slots have no row and would become gaps that workers
run again after the next migrate up. Re-open them first to keep them, or pass
--discard to delete the ranges.`,
		Example: `  almanac migrate down --dry-run
  almanac migrate down --to 1 --dry-run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if to < 0 || to > len(migrations.All()) {
				return usagef("--to %d: expected a version from 0 to %d", to, len(migrations.All()))
			}
			if yes && dryRun {
				return usagef("give --yes or --dry-run, not both")
			}
			if !yes && !dryRun && !a.interactive() {
				return usagef("migrate down drops almanac's tables in schema %q with every series and slot in them; pass --yes to confirm, or --dry-run to print the SQL it would run", a.schema)
			}
			c, err := a.connectClient(ctx)
			if err != nil {
				return err
			}
			if dryRun || !yes {
				states, err := c.Migrations(ctx)
				if err != nil {
					return fmt.Errorf("migrate down: %w", err)
				}
				plan, err := migrations.DownPlan(a.schema, states, to)
				if err != nil {
					return fmt.Errorf("migrate down: %w", err)
				}
				if dryRun && a.json {
					return a.printJSON(struct {
						Schema string `json:"schema"`
						DryRun bool   `json:"dry_run"`
						SQL    string `json:"sql"`
					}{a.schema, true, plan})
				}
				if plan == "" {
					fmt.Fprintf(a.stdout, "nothing to undo in schema %q in %s\n", a.schema, a.target)
					return nil
				}
				if dryRun {
					fmt.Fprintf(a.stdout, "-- dry run: the SQL migrate down --to %d would run in schema %q; nothing was changed.\n\n%s", to, a.schema, plan)
					return nil
				}
				what := "almanac's tables"
				if to > 0 {
					what = fmt.Sprintf("the migrations after version %d", to)
				}
				if !a.confirm(fmt.Sprintf("migrate down undoes %s in schema %q, on %s: every series, slot and history row in them is deleted, and this cannot be undone. (--dry-run prints the SQL.)",
					what, a.schema, a.target)) {
					return problemError(fmt.Errorf("migrate down: not confirmed; nothing was changed"))
				}
			}
			if discard && to < 3 {
				if err := a.discardCompacted(ctx); err != nil {
					return fmt.Errorf("migrate down: %w", err)
				}
			}
			undone, err := c.MigrateDown(ctx, to)
			if err != nil {
				return fmt.Errorf("migrate down: %w", err)
			}
			if a.json {
				return a.printJSON(migrateResult{Schema: a.schema, Undone: undone, Version: to})
			}
			for _, v := range undone {
				fmt.Fprintf(a.stdout, "undid %s\n", migrationName(v))
			}
			if to == 0 {
				fmt.Fprintf(a.stdout, "removed almanac from schema %q in %s\n", a.schema, a.target)
			} else {
				fmt.Fprintf(a.stdout, "schema %q in %s is at version %d\n", a.schema, a.target, to)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "version to go down to (0 removes everything)")
	cmd.Flags().BoolVar(&yes, "yes", false, "drop without asking (required when standard input is not a terminal)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the SQL down would run; change nothing")
	cmd.Flags().BoolVar(&discard, "discard", false, "below version 3, delete the compacted ranges (finished slots without a row) instead of refusing")
	return cmd
}

// discardCompacted deletes the schema's compacted ranges, when it has the
// table, so that undoing migration 3 goes through (migrate down --discard).
func (a *app) discardCompacted(ctx context.Context) error {
	table := sqlschema.Quote(a.schema) + ".slot_compacted"
	var exists bool
	if err := a.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
		return err
	}
	_, err := a.pool.Exec(ctx, `DELETE FROM `+table)
	return err
}

func (a *app) migrateGrantsCommand() *cobra.Command {
	var runtime, migrator string
	cmd := &cobra.Command{
		Use:   "grants --runtime ROLE --migrator ROLE",
		Short: "Print the SQL that sets up least-privilege roles: one that migrates, one that runs",
		Long: `Print the SQL, for a superuser or the database owner to run once, that gives
almanac's schema two roles (create them first with CREATE ROLE ... LOGIN):

--migrator  owns the schema: runs migrate up (or Client.Migrate on upgrades);
            needs no privilege on the database itself
--runtime   reads and writes rows and nothing else: workers, the sidecar, the
            coverage commands, and Client.Migrate at start when the schema is
            current (it then only reads the version table)

Default privileges extend the runtime role's grants to whatever later
migrations create, as long as they run as the migration role.

Pipe the output into psql as a superuser or the database owner, e.g.
almanac migrate grants --runtime app --migrator app_owner | psql "$ADMIN_DATABASE_URL"`,
		Example: `  almanac migrate grants --runtime app --migrator app_owner`,
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			if runtime == "" {
				return usagef("--runtime is required, e.g. --runtime app")
			}
			if migrator == "" {
				return usagef("--migrator is required, e.g. --migrator app_owner")
			}
			text, err := migrations.Grants(a.schema, runtime, migrator)
			if err != nil {
				return usageError(err)
			}
			_, err = fmt.Fprint(a.stdout, text)
			return err
		},
	}
	cmd.Flags().StringVar(&runtime, "runtime", "", "role of workers and everyday commands: reads and writes rows (required)")
	cmd.Flags().StringVar(&migrator, "migrator", "", "role that runs migrations and owns the schema (required)")
	return cmd
}

type migrationState struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

func (a *app) migrateStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show which migrations are applied, and the server's PostgreSQL version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connectClient(cmd.Context())
			if err != nil {
				return err
			}
			states, err := c.Migrations(cmd.Context())
			if err != nil {
				return fmt.Errorf("migrate status: %w", err)
			}
			server, err := c.ServerVersion(cmd.Context())
			if err != nil {
				return fmt.Errorf("migrate status: %w", err)
			}
			out := make([]migrationState, len(states))
			for i, s := range states {
				out[i] = migrationState{Version: s.Version, Name: s.Name, Applied: !s.AppliedAt.IsZero()}
				if !s.AppliedAt.IsZero() {
					at := s.AppliedAt
					out[i].AppliedAt = &at
				}
			}
			if a.json {
				return a.printJSON(struct {
					Schema     string           `json:"schema"`
					Database   string           `json:"database"`
					Server     string           `json:"server_version"`
					Migrations []migrationState `json:"migrations"`
				}{a.schema, a.target, server, out})
			}
			fmt.Fprintf(a.stdout, "schema %q in %s on PostgreSQL %s\n", a.schema, a.target, server)
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
			for _, s := range out {
				applied := "pending"
				if s.AppliedAt != nil {
					applied = s.AppliedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%03d\t%s\t%s\n", s.Version, s.Name, applied)
			}
			return tw.Flush()
		},
	}
}

func (a *app) migrateSQLCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "sql",
		Short: "Print the migrations as plain SQL, for teams that apply them with their own tool",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			text, err := migrations.SQL(a.schema)
			if err != nil {
				return usageError(err)
			}
			if a.json {
				return a.printJSON(struct {
					Schema  string `json:"schema"`
					Version int    `json:"version"`
					SQL     string `json:"sql"`
				}{a.schema, len(migrations.All()), text})
			}
			_, err = fmt.Fprint(a.stdout, text)
			return err
		},
	}
}

// migrationName returns the name of a schema version as its files are
// named, e.g. "001_initial", or the bare number of an unknown version.
func migrationName(version int) string {
	for _, m := range migrations.All() {
		if m.Version == version {
			return m.String()
		}
	}
	return fmt.Sprintf("%03d", version)
}
