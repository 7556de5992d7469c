package lb

import (
	"testing"

	"github.com/meshlet-dev/meshlet/internal/puritytest"
)

// TestPackageIsPure keeps lb free of I/O, goroutines, wall clocks and other
// packages of this module.
func TestPackageIsPure(t *testing.T) {
	puritytest.Check(t, 10,
		"cmp", "encoding/binary", "errors", "fmt", "math", "math/bits", "slices",
		"sort", "strconv", "strings", "sync/atomic", "time",
		"github.com/cespare/xxhash/v2")
}
