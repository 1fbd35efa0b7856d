package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
)

// What `almanac run --log-format json` writes besides the client's events:
// every line of its output is a JSON record, so that a log pipeline never
// meets a line it cannot parse. The command's output lines, the signal
// notices and the final error become records; durations are seconds.

// secondsAttr is the ReplaceAttr of the JSON log: a duration becomes
// seconds under its key with "_s" appended ("timeout_s": 3600), since
// slog's JSON handler would write unit-less nanoseconds.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_s", a.Value.Duration().Seconds())
	}
	return a
}

// jsonLogger returns a JSON logger on w at the command's level, durations
// in seconds.
func (a *app) jsonLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: a.logLevel, ReplaceAttr: secondsAttr}))
}

// jsonLogs reports whether the command writes its log as JSON records.
func (a *app) jsonLogs() bool { return a.logs && a.logFormat == "json" }

// signalLog, once set, is where the notices of a stop signal go as records
// (almanac run --log-format json); nil: plain lines on stderr.
var signalLog atomic.Pointer[slog.Logger]

// signalNotice tells, on stderr, that a signal starts a graceful stop, or
// (second) that a second one ends the process at once.
func signalNotice(sig os.Signal, second bool) {
	msg := fmt.Sprintf("almanac: %s: stopping gracefully; a second signal stops at once", sig)
	if second {
		msg = fmt.Sprintf("almanac: second %s: killing running commands and exiting without waiting", sig)
	}
	if l := signalLog.Load(); l != nil {
		l.Warn(msg, "signal", sig.String())
		return
	}
	fmt.Fprintln(os.Stderr, msg)
}

// outputRecords writes a command's output lines as records of log, the
// slot's attributes already attached: the line, without the slot prefix
// the command gives it, is the message. The command writes whole lines,
// passwords redacted.
type outputRecords struct {
	log    *slog.Logger
	prefix string
	buf    []byte
}

func (w *outputRecords) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.log.Info(strings.TrimPrefix(string(w.buf[:i]), w.prefix))
		w.buf = w.buf[i+1:]
	}
}

// slotOutput returns the writers of one run's stdout and stderr as records
// on stdout and stderr, with the slot as attributes: series, interval,
// slot, start, attempt and the stream.
func slotOutput(stdout, stderr *slog.Logger, l *almanac.Lease) (io.Writer, io.Writer) {
	s := l.Slot
	attrs := []any{"series", s.Name, "interval", s.Interval.String(), "slot", s.Slot.String(),
		"start", slot.FormatTime(s.Start), "attempt", s.Attempt}
	// The prefix scheduler.Command puts before each line.
	prefix := "[" + s.Name + " " + s.Slot.String() + "] "
	return &outputRecords{log: stdout.With(slices.Concat(attrs, []any{"stream", "stdout"})...), prefix: prefix},
		&outputRecords{log: stderr.With(slices.Concat(attrs, []any{"stream", "stderr"})...), prefix: prefix}
}
