//go:build linux

package topology

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrMissing is wrapped by the errors of components whose Debian package is
// not installed; the message names the apt-get line that installs it.
var ErrMissing = errors.New("topology: component not installed")

// sbin holds programs that are not on every user's PATH (Debian's
// pgbouncer).
var sbin = []string{"/usr/sbin", "/usr/local/sbin"}

// program finds an installed program, on PATH or in sbin; when it is
// missing, the error names the packages that install it.
func program(name string, pkgs ...string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	for _, dir := range sbin {
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return path, nil
		}
	}
	return "", missing(name, pkgs...)
}

func missing(what string, pkgs ...string) error {
	line := "apt-get install -y"
	for _, p := range pkgs {
		line += " " + p
	}
	return fmt.Errorf("%w: %s not found; install it with: %s", ErrMissing, what, line)
}
