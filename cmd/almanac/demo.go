package main

import "github.com/spf13/cobra"

// demoCommand is `almanac demo`, the self-contained showcase.
func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "demo",
		Short:  "Show almanac at work on a fresh schema, with crashes and a backfill",
		Hidden: true, // until the demo lands
		Args:   noArgs,
		RunE:   func(*cobra.Command, []string) error { return usagef("almanac demo is not built yet") },
	}
}
