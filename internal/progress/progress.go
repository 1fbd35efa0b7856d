// Package progress draws a one-line progress bar for long CLI operations.
// It only writes where a person watches: the caller decides that (a
// terminal, not --json), and gets a Bar that does nothing otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// redrawEvery limits redraws, so a fast operation does not spend its time
// writing to the terminal.
const redrawEvery = 100 * time.Millisecond

const width = 30

// Bar is a progress bar on one terminal line. The zero Bar and a nil *Bar
// draw nothing.
type Bar struct {
	w     io.Writer
	label string
	last  time.Time
	drawn bool
}

// ForTerminal returns a bar labelled label drawing on w when w is a
// terminal and enabled is set, else a Bar that draws nothing.
func ForTerminal(w io.Writer, label string, enabled bool) *Bar {
	f, ok := w.(*os.File)
	if !enabled || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &Bar{w: w, label: label}
}

// Set shows done of total, at most every 100 ms and always at the end.
func (b *Bar) Set(done, total int64) {
	if b == nil || total <= 0 {
		return
	}
	now := time.Now()
	if done < total && now.Sub(b.last) < redrawEvery {
		return
	}
	b.last, b.drawn = now, true
	filled := int(done * width / total)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3d%% %d/%d", b.label,
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), done*100/total, done, total)
}

// Clear erases the bar, so the command's output starts on a clean line.
func (b *Bar) Clear() {
	if b == nil || !b.drawn {
		return
	}
	fmt.Fprint(b.w, "\r\033[K")
	b.drawn = false
}
