package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/almanactest"
)

func TestMain(m *testing.M) { almanactest.Main(m) }

// TestQuickStart runs the README's quick start in the test's schema
// (ALMANAC_SCHEMA for almanac's tables, search_path for its report table)
// until the window that is due now is reported.
func TestQuickStart(t *testing.T) {
	schema := almanactest.Schema(t)
	cfg, err := pgxpool.ParseConfig(almanactest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	t.Setenv("ALMANAC_SCHEMA", schema)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- run(ctx, pool) }()
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM report`).Scan(&n)
		return n >= 1
	}, 30*time.Second, 50*time.Millisecond, "the due window is reported")
	cancel()
	require.NoError(t, <-done)
}

// TestReadmeShowsThisProgram keeps the README's quick start the program the
// test above runs.
func TestReadmeShowsThisProgram(t *testing.T) {
	program, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(readme), "```go\n"+string(program)+"```"),
		"README.md's Go quick start must be examples/quickstart/main.go verbatim")
}
