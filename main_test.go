package almanac_test

import (
	"testing"

	"github.com/almanacdev/almanac/almanactest"
)

func TestMain(m *testing.M) { almanactest.Main(m) }
