//go:build !unix

package suite

import (
	"context"
	"errors"
)

// cluster is not available on this system: the sustained scenario starts
// its server with initdb and pg_ctl as another user, a Unix notion.
type cluster struct{}

func startCluster(context.Context, []ServerSetting) (*cluster, error) {
	return nil, errors.New("the sustained scenario runs on Unix only")
}

func (*cluster) url() string { return "" }

func (*cluster) stop() {}
