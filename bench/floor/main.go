// Command floor is the proxy benchmark's yardstick for Go itself: the
// least a goroutine-per-connection HTTP/1.1 proxy written in Go costs per
// request on this machine. Each client connection gets one goroutine and
// one upstream connection; a request is whatever one read returns (the
// benchmark's bodiless GETs), a response is read up to its Content-Length;
// nothing is parsed, routed, counted or logged. Reads and sends are raw
// system calls, the runtime's poller only waits for readiness, as in
// meshlet's data plane (dataplane/internal/rawio). It is not a proxy to use: it
// measures how much of meshlet's CPU per request is the Go runtime and the
// kernel, and how much is meshlet's own work.
package main

import (
	"bytes"
	"errors"
	"flag"
	"log"
	"net"
	"strconv"
	"syscall"
	"unsafe"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18104", "address to listen on")
	upstream := flag.String("upstream", "127.0.0.1:18080", "the upstream's address")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("floor: listen %s: %v", *listen, err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("floor: accept: %v", err)
		}
		go relay(c.(*net.TCPConn), *upstream)
	}
}

// relay carries one client connection's requests to its own upstream
// connection and the responses back.
func relay(client *net.TCPConn, upstream string) {
	defer client.Close()
	uc, err := net.Dial("tcp", upstream)
	if err != nil {
		log.Printf("floor: dial %s: %v", upstream, err)
		return
	}
	defer uc.Close()
	down, err := client.SyscallConn()
	if err != nil {
		return
	}
	up, err := uc.(*net.TCPConn).SyscallConn()
	if err != nil {
		return
	}
	req := make([]byte, 4096)
	resp := make([]byte, 16384)
	for {
		n, err := rawRead(down, req)
		if err != nil || rawSend(up, req[:n]) != nil {
			return
		}
		m, want := 0, -1
		for want < 0 || m < want {
			if m == len(resp) {
				return // a head or body larger than the benchmark's
			}
			k, err := rawRead(up, resp[m:])
			if err != nil {
				return
			}
			m += k
			if want < 0 {
				want = responseLength(resp[:m])
			}
		}
		if rawSend(down, resp[:m]) != nil {
			return
		}
	}
}

// responseLength is the length of the response whose start is b (head
// and Content-Length body), or -1 while the head is incomplete.
func responseLength(b []byte) int {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return -1
	}
	head := bytes.ToLower(b[:end+2])
	i := bytes.Index(head, []byte("\r\ncontent-length:"))
	if i < 0 {
		return end + 4
	}
	v := head[i+len("\r\ncontent-length:"):]
	v = bytes.TrimSpace(v[:bytes.IndexByte(v, '\r')])
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return end + 4
	}
	return end + 4 + n
}

var errClosed = errors.New("connection closed")

// rawRead reads once into p, waiting in the poller while there is
// nothing. RawSyscall, not syscall.Read: entering the call through the
// scheduler wakes the runtime's monitor thread (see dataplane/internal/rawio).
func rawRead(rc syscall.RawConn, p []byte) (int, error) {
	var n uintptr
	var errno syscall.Errno
	if err := rc.Read(func(fd uintptr) bool {
		for {
			n, _, errno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	}); err != nil {
		return 0, err
	}
	switch {
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, errClosed
	}
	return int(n), nil
}

// rawSend sends all of p, waiting in the poller while the socket is full.
func rawSend(rc syscall.RawConn, p []byte) error {
	var errno syscall.Errno
	if err := rc.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			var n uintptr
			n, _, errno = syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
				syscall.MSG_NOSIGNAL, 0, 0)
			switch errno {
			case 0:
				p = p[n:]
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				return true
			}
		}
		return true
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
