package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"
)

// interactive reports whether standard input is a terminal, where a person
// can be asked to confirm.
func (a *app) interactive() bool {
	f, ok := a.stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// confirm writes question on stderr, reads one line from standard input and
// reports whether it was "yes". End of input is a no.
func (a *app) confirm(question string) bool {
	fmt.Fprintf(a.stderr, "%s\nType yes to go on: ", question)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}
