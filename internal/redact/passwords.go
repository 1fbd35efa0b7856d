package redact

import "context"

// passwordsKey is the context key of the passwords of the scheduler's
// connections, which the scheduler gives its lease handlers so that a
// command's environment can leave out every variable holding one.
type passwordsKey struct{}

// WithPasswords returns ctx carrying passwords, those of the connections
// of the scheduler that calls a handler with it; ctx itself if there are
// none.
func WithPasswords(ctx context.Context, passwords []string) context.Context {
	if len(passwords) == 0 {
		return ctx
	}
	return context.WithValue(ctx, passwordsKey{}, passwords)
}

// Passwords returns the passwords WithPasswords put in ctx, or nil.
func Passwords(ctx context.Context) []string {
	p, _ := ctx.Value(passwordsKey{}).([]string)
	return p
}
