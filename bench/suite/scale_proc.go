package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// scaleProc is a running child of the series-scale scenario, seen from
// the parent: its process, the lines it writes, and the end of its log.
type scaleProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// msgs carries the child's lines but its progress, which registered
	// keeps instead (the latest count), so that a parent busy elsewhere
	// never blocks the child.
	msgs       chan childMsg
	registered atomic.Int64
	exited     chan struct{}
	log        tail
}

// startScaleProc starts the bench binary again as a series-scale child
// with cfg.
func startScaleProc(ctx context.Context, cfg scaleChildConfig) (*scaleProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the bench's own binary, to start as a child: %w", err)
	}
	p := &scaleProc{cmd: exec.CommandContext(ctx, exe), msgs: make(chan childMsg, 4), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), ChildEnv+"="+scaleChildName)
	p.cmd.Stderr = &p.log
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a child: %w", err)
	}
	b, _ := json.Marshal(cfg) // plain data: cannot fail
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.kill()
		return nil, fmt.Errorf("configure the child: %w", err)
	}
	go func() {
		defer close(p.exited)
		defer close(p.msgs)
		dec := json.NewDecoder(stdout)
		for {
			var m childMsg
			if err := dec.Decode(&m); err != nil {
				_, _ = io.Copy(io.Discard, stdout)
				_ = p.cmd.Wait() // after the last read, as Wait requires
				return
			}
			if m.Event == "progress" {
				p.registered.Store(int64(m.Registered))
				continue
			}
			p.msgs <- m
		}
	}()
	return p, nil
}

func (p *scaleProc) pid() int { return p.cmd.Process.Pid }

// awaitStarted waits for the child to have declared its tenants and
// started its client, at most limit, and stops it if its resident memory
// goes above rssLimit MiB first. It returns the child's start-up figures,
// or what happened instead (the child then stopped); an error only when
// ctx ends.
func (p *scaleProc) awaitStarted(ctx context.Context, tenants int, limit time.Duration, rssLimit float64) (childMsg, string, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	where := func() string {
		n := int(p.registered.Load())
		if n < tenants {
			return fmt.Sprintf("after declaring %s of %s tenants", thousands(n), thousands(tenants))
		}
		return fmt.Sprintf("after declaring all %s tenants, in Start", thousands(tenants))
	}
	for {
		select {
		case m, ok := <-p.msgs:
			switch {
			case !ok:
				return childMsg{}, "exited before it had started, " + where() + ": " + p.log.last(), nil
			case m.Event == "started":
				return m, "", nil
			case m.Event == "error":
				p.kill()
				return childMsg{}, "failed to start: " + m.Error, nil
			}
		case <-tick.C:
			if rss, err := residentMiB(p.pid()); err == nil && rss > rssLimit {
				p.kill()
				return childMsg{}, fmt.Sprintf("stopped at %.0f MiB of RSS, above the scenario's limit of %.0f MiB, %s", rss, rssLimit, where()), nil
			}
		case <-deadline.C:
			p.kill()
			return childMsg{}, fmt.Sprintf("did not start within %s: stopped %s", limit, where()), nil
		case <-ctx.Done():
			p.kill()
			return childMsg{}, "", ctx.Err()
		}
	}
}

// errChildGone is returned by call when the child has exited.
var errChildGone = errors.New("the child exited")

// call sends the child a command and returns its answer.
func (p *scaleProc) call(ctx context.Context, command string) (childMsg, error) {
	if _, err := io.WriteString(p.stdin, command+"\n"); err != nil {
		return childMsg{}, fmt.Errorf("%w: %s", errChildGone, p.log.last())
	}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	select {
	case m, ok := <-p.msgs:
		switch {
		case !ok:
			return childMsg{}, fmt.Errorf("%w: %s", errChildGone, p.log.last())
		case m.Event == "error":
			return childMsg{}, fmt.Errorf("child: %s", m.Error)
		}
		return m, nil
	case <-timeout.C:
		return childMsg{}, fmt.Errorf("child: no answer to %q within a minute", command)
	case <-ctx.Done():
		return childMsg{}, ctx.Err()
	}
}

// stop closes the child's stdin, which stops its client, and waits for it
// to exit, killing it after limit. It says what went wrong, "" for nothing.
func (p *scaleProc) stop(limit time.Duration) string {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			return fmt.Sprintf("exited with code %d on stop: %s", code, p.log.last())
		}
		return ""
	case <-time.After(limit):
		p.kill()
		return fmt.Sprintf("did not stop within %s of being asked", limit)
	}
}

// kill ends the child at once and waits for it.
func (p *scaleProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// tail keeps the last few KiB written to it: a child's log.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4 << 10

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailSize {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-tailSize:]...)
	}
	return len(b), nil
}

// last returns the last line written, or a word saying there was none.
func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(strings.TrimSpace(string(t.buf))) == 0 {
		return "nothing in its log"
	}
	return lastLine(t.buf)
}

// thousands writes n with thousands separators: 100,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
