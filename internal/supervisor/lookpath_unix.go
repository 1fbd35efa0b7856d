//go:build unix

package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// LookPath resolves file as a shell would start it from dir: a name with a
// slash is a path, relative to dir (the current directory when dir is
// empty); a bare name is looked up in pathList, the command's PATH, whose
// relative entries are relative to dir too. It returns an absolute path
// to a regular file this process may execute; a script's interpreter (its
// "#!" line) must exist and be executable too. The errors wrap
// ErrCannotStart and name file and what is wrong.
func LookPath(file, dir, pathList string) (string, error) {
	if file == "" {
		return "", fmt.Errorf("%w: the command name is empty", ErrCannotStart)
	}
	if strings.Contains(file, "/") {
		return checkExecutable(file, absolute(file, dir))
	}
	for _, entry := range filepath.SplitList(pathList) {
		if entry == "" {
			entry = "." // POSIX: an empty entry is the current directory
		}
		path := absolute(filepath.Join(entry, file), dir)
		if checkFile(path) == "" {
			return checkExecutable(file, path)
		}
	}
	return "", fmt.Errorf("%w: %q not found in PATH %q", ErrCannotStart, file, pathList)
}

func absolute(path, dir string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// checkExecutable checks that path (found for file) can be executed, and
// so can the interpreter a script names.
func checkExecutable(file, path string) (string, error) {
	if problem := checkFile(path); problem != "" {
		return "", fmt.Errorf("%w: %q %s", ErrCannotStart, file, problem)
	}
	if interp := interpreter(path); interp != "" {
		if problem := checkFile(interp); problem != "" {
			return "", fmt.Errorf("%w: %q names the interpreter %q, which %s", ErrCannotStart, file, interp, problem)
		}
	}
	return path, nil
}

// checkFile says what keeps path from being executed, or "".
func checkFile(path string) string {
	info, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Sprintf("does not exist (%s)", path)
	case info.IsDir():
		return fmt.Sprintf("is a directory (%s)", path)
	case !info.Mode().IsRegular():
		return fmt.Sprintf("is not a regular file (%s)", path)
	case unix.Access(path, unix.X_OK) != nil:
		return fmt.Sprintf("is not executable (%s, mode %s)", path, info.Mode().Perm())
	}
	return ""
}

// interpreter returns the program named on a script's "#!" line, or "".
func interpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "" // executable but not readable: exec will tell
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := f.Read(head)
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("#!")) {
		return ""
	}
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 || !filepath.IsAbs(fields[0]) {
		return ""
	}
	return fields[0]
}
