// Package defaults holds the defaults and limits that the engine applies and
// that its front ends (the CLI's flags, the coverage page) show or check
// before calling it, so that each value is defined once. The public
// packages state them on the fields and parameters they apply to.
package defaults

const (
	// ReopenReason is the message of re-opened slots when no reason is
	// given.
	ReopenReason = "reopened"
	// SkipReason is the message of skipped slots when no reason is given.
	SkipReason = "skipped"
	// FailuresLimit is how many failed slots Failures lists when no limit
	// is given.
	FailuresLimit = 1000
	// MaxHeatmapBuckets bounds the buckets of a heatmap.
	MaxHeatmapBuckets = 10_000
	// MaxHeatmaps is how many calendars the coverage page computes at
	// once by default (web.Options.MaxHeatmaps); almanac serve sizes its
	// pool by it.
	MaxHeatmaps = 2
	// SkipExitCode is the exit status with which a command run per slot
	// marks its slot SKIP ("nothing to do for this interval"). 99 is unused
	// by shells (126, 127, 128+n) and by the sysexits conventions (64–78).
	SkipExitCode = 99
)
