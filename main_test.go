package almanac_test

import (
	"testing"

	"github.com/almanacdev/almanac/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
