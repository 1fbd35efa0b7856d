//go:build linux

package topology

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/almanacdev/almanac/internal/demo/pgcluster"
)

// Cluster is a throwaway PostgreSQL cluster (see pgcluster) kept in a work
// directory of this package, so that a test binary that dies leaves no
// server behind: the next component started on the machine stops it.
type Cluster struct {
	*pgcluster.Cluster
	dir *workDir
}

// StartCluster starts a throwaway cluster with settings (see
// pgcluster.Options.Settings), for tests that restart or crash their server.
func StartCluster(ctx context.Context, settings map[string]string) (*Cluster, error) {
	w, err := newWorkDir("cluster")
	if err != nil {
		return nil, err
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(w.path, "pg"), Settings: settings})
	if err != nil {
		return nil, errors.Join(err, w.remove())
	}
	return &Cluster{Cluster: c, dir: w}, nil
}

// Destroy stops the server and removes its directory. Calling it again
// does nothing.
func (c *Cluster) Destroy() error {
	if c.dir == nil {
		return nil
	}
	err := errors.Join(c.Cluster.Destroy(), c.dir.remove())
	c.dir = nil
	return err
}
