//go:build !linux

package dataplane

import "net"

// proxyReceived has no TCP_INFO to read here: ok is false.
func proxyReceived(*Server, net.Conn) (uint64, bool) { return 0, false }

// proxyGotFIN has no TCP_INFO to read here: ok is false.
func proxyGotFIN(*Server, net.Conn) (bool, bool) { return false, false }
