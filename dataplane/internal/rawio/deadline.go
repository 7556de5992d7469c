package rawio

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// ALongTimeAgo is a deadline in the past: set on a connection, it wakes
// whatever waits to read or write it with a deadline error.
var ALongTimeAgo = time.Unix(1, 0)

// IsDeadline reports whether err is a deadline's or a timeout's: a
// context's, a socket deadline's, or a net.Error that says so.
func IsDeadline(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
