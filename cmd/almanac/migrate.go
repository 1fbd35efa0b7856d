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
	cmd.AddCommand(a.migrateUpCommand(), a.migrateDownCommand(), a.migrateStatusCommand(), a.migrateSQLCommand())
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
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			applied, err := migrations.Up(cmd.Context(), pool, a.schema)
			if err != nil {
				return fmt.Errorf("migrate up: %w", err)
			}
			res := migrateResult{Schema: a.schema, Applied: applied, Version: migrations.Latest()}
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
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Undo migrations; by default all of them, which deletes every series and slot",
		Long: `Undo applied migrations newer than --to, newest first. With the default --to 0
everything almanac created in the schema is dropped, all series and slots
included, and the schema itself when nothing else is left in it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to < 0 || to > migrations.Latest() {
				return usagef("--to %d: expected a version from 0 to %d", to, migrations.Latest())
			}
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			undone, err := migrations.Down(cmd.Context(), pool, a.schema, to)
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
		Short: "Show which migrations are applied",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			states, err := migrations.Status(cmd.Context(), pool, a.schema)
			if err != nil {
				return fmt.Errorf("migrate status: %w", err)
			}
			out := make([]migrationState, len(states))
			for i, s := range states {
				out[i] = migrationState{Version: s.Version, Name: s.Name, Applied: s.Applied()}
				if s.Applied() {
					at := s.AppliedAt
					out[i].AppliedAt = &at
				}
			}
			if a.json {
				return a.printJSON(struct {
					Schema     string           `json:"schema"`
					Migrations []migrationState `json:"migrations"`
				}{a.schema, out})
			}
			fmt.Fprintf(a.stdout, "schema %q\n", a.schema)
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

func migrationName(version int) string {
	for _, m := range migrations.All() {
		if m.Version == version {
			return fmt.Sprintf("%03d_%s", m.Version, m.Name)
		}
	}
	return fmt.Sprintf("%03d", version)
}
