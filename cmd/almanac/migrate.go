package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac/migrations"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create, inspect, remove or print almanac's schema",
		Long: `Manage almanac's tables in the schema given by --schema (default almanac).

Migrations are versioned SQL files embedded in the binary. Each runs in its own
transaction under an advisory lock, so several processes may migrate at once.`,
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
	return &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration (safe to run repeatedly and concurrently)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connectClient(cmd.Context())
			if err != nil {
				return err
			}
			applied, err := c.Migrate(cmd.Context())
			if err != nil {
				return fmt.Errorf("migrate up: %w", err)
			}
			res := migrateResult{Schema: a.schema, Applied: applied, Version: len(migrations.All())}
			if a.json {
				return a.printJSON(res)
			}
			if len(applied) == 0 {
				fmt.Fprintf(a.stdout, "schema %q is up to date (version %d)\n", a.schema, res.Version)
				return nil
			}
			for _, v := range applied {
				fmt.Fprintf(a.stdout, "applied %s\n", migrationName(v))
			}
			fmt.Fprintf(a.stdout, "schema %q is at version %d\n", a.schema, res.Version)
			return nil
		},
	}
}

func (a *app) migrateDownCommand() *cobra.Command {
	var to int
	var yes, dryRun bool
	cmd := &cobra.Command{
		Use:   "down [--to N] (--yes | --dry-run)",
		Short: "Undo migrations; by default all of them, which deletes every series and slot",
		Long: `Undo applied migrations newer than --to, newest first. With the default --to 0
everything almanac created in the schema is dropped, all series and slots
included, and the schema itself when nothing else is left in it.

This cannot be undone. On a terminal, down says what it will drop and asks you
to type yes; otherwise (a script, a pipe) it needs --yes. --dry-run prints the
SQL it would run and changes nothing.`,
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
					fmt.Fprintf(a.stdout, "nothing to undo in schema %q\n", a.schema)
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
					what, a.schema, describeTarget(a.pool.Config().ConnConfig.Config))) {
					return problemError(fmt.Errorf("migrate down: not confirmed; nothing was changed"))
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
				fmt.Fprintf(a.stdout, "removed almanac from schema %q\n", a.schema)
			} else {
				fmt.Fprintf(a.stdout, "schema %q is at version %d\n", a.schema, to)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "version to go down to (0 removes everything)")
	cmd.Flags().BoolVar(&yes, "yes", false, "drop without asking (required when standard input is not a terminal)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the SQL down would run; change nothing")
	return cmd
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
					Server     string           `json:"server_version"`
					Migrations []migrationState `json:"migrations"`
				}{a.schema, server, out})
			}
			fmt.Fprintf(a.stdout, "schema %q on PostgreSQL %s\n", a.schema, server)
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
