//go:build !unix

package suite

import (
	"context"
	"errors"
)

// cluster is not available on this system: the sustained and series-scale
// scenarios start their server with initdb and pg_ctl as another user, a
// Unix notion.
type cluster struct{}

var errNoCluster = errors.New("a cluster of the bench's own (sustained, series-scale) runs on Unix only")

func findBin() (string, error) { return "", errNoCluster }

func startCluster(context.Context, []ServerSetting) (*cluster, error) { return nil, errNoCluster }

func (*cluster) url() string { return "" }

func (*cluster) stop() {}
