//go:build unix

package pgcluster

import (
	"os"
	"os/exec"
	"syscall"
)

// credential is the user and group a server runs as.
type credential = syscall.Credential

// runAs makes cmd run as cred.
func runAs(cmd *exec.Cmd, cred *credential) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
}

// fileOwner returns the owner and group of a file.
func fileOwner(fi os.FileInfo) (uid, gid uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}
