package e2e

import (
	"os"
	"testing"

	"github.com/meshpilot/meshpilot/internal/pilotbin"
)

func TestMain(m *testing.M) { os.Exit(pilotbin.Main(m)) }
