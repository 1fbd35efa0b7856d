package main

import "github.com/spf13/cobra"

// benchCommand is `almanac bench`; see BENCHMARKS.md.
func (a *app) benchCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "bench",
		Short:  "Benchmark almanac against raw SQL and River on this machine",
		Hidden: true, // until the suite lands
		Args:   noArgs,
		RunE:   func(*cobra.Command, []string) error { return usagef("almanac bench is not built yet") },
	}
}
