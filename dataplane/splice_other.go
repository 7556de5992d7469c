//go:build !linux

package dataplane

import "net"

// pipePool is the TCP proxy's splice pipes, on Linux only.
type pipePool struct{}

const pipePoolSize = 0

func newPipePool(int) *pipePool { return nil }

func (*pipePool) close() {}

func (*pipePool) idle() int { return 0 }

// splice is not available: the TCP proxy copies with read and write.
func (*pipePool) splice(dst, src *net.TCPConn, idle *idleWatch) (int64, error) { return 0, errNoSplice }
