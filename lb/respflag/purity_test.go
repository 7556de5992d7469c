package respflag

import (
	"testing"

	"github.com/meshlet-dev/meshlet/internal/puritytest"
)

// TestPackageIsPure keeps respflag free of I/O, goroutines, wall clocks and
// packages of this module other than the allowed lb packages.
func TestPackageIsPure(t *testing.T) {
	puritytest.Check(t, 1, "fmt", "strings")
}
