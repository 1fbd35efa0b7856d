package slot

// The kinds of bad input, for the tests' errors.Is.
var (
	ErrInterval = errInterval
	ErrTime     = errTime
	ErrZone     = errZone
	ErrSlot     = errSlot
	ErrRange    = errRange
	ErrName     = errName
)
var DefaultOrigin = defaultOrigin
