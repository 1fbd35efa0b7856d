package wake_test

import (
	"testing"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
