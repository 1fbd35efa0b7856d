package migrations

// Test hooks for package migrations_test.
var (
	BootstrapWait = &bootstrapWait
	ErrLocked     = errLocked
)
