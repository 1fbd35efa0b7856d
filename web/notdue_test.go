package web

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNotDueIsLeastUrgent: a cell of future slots without rows is drawn
// as not due, and any other state present wins over it.
func TestNotDueIsLeastUrgent(t *testing.T) {
	require.Equal(t, "not-due", counts{Slots: 5, NotDue: 5}.state())
	require.Equal(t, "complete", counts{Slots: 5, Complete: 1, NotDue: 4}.state())
	require.Equal(t, "missing", counts{Slots: 5, Missing: 1, NotDue: 4}.state())
}
