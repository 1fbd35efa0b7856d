package redact

import (
	"context"
	"log/slog"
)

// Handler returns a slog.Handler that passes records to h with passwords
// hidden (String) in the message and in every string or error attribute,
// groups included: the last line of defence for an error that quotes a
// connection URL. Records below h's level cost nothing more.
func Handler(h slog.Handler) slog.Handler {
	if r, ok := h.(handler); ok {
		return r
	}
	return handler{h}
}

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = attr(a)
	}
	return handler{h.next.WithAttrs(clean)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

// attr returns a with its passwords hidden.
func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); String(s) != s {
			return slog.String(a.Key, String(s))
		}
	case slog.KindGroup:
		as := v.Group()
		clean := make([]slog.Attr, len(as))
		for i, g := range as {
			clean[i] = attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clean...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, String(err.Error()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
