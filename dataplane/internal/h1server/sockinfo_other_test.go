//go:build !linux

package h1server

import "net"

// serverReceived has no TCP_INFO to read here: ok is false.
func serverReceived(*Server, net.Conn) (uint64, bool) { return 0, false }

// serverGotFIN has no TCP_INFO to read here: ok is false.
func serverGotFIN(*Server, net.Conn) (bool, bool) { return false, false }
