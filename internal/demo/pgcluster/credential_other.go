//go:build !unix

package pgcluster

import (
	"os"
	"os/exec"
)

// credential is the user and group a server runs as.
type credential struct{ Uid, Gid uint32 }

// runAs does nothing: a server runs as another user only when this process
// is root, which is a Unix notion.
func runAs(*exec.Cmd, *credential) {}

// fileOwner reports no owner.
func fileOwner(os.FileInfo) (uid, gid uint32, ok bool) { return 0, 0, false }
