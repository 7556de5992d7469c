package bpf

import (
	"fmt"
	"io"
	"net"
	"testing"
)

// BenchmarkHop measures the app<->sidecar hop on loopback, plain TCP
// against the sk_msg redirect, for writes of 1 B, 1 KiB, 16 KiB and 64 KiB:
//   - rtt: one message there and back per op (ns/op is the round trip);
//   - stream: one write per op to a reader draining the other end (MB/s).
//
// Both pairs live in the same attached pod cgroup; the plain pair is made
// with acceleration off, so it never enters the sockhash. Readers use Read
// (splice would not see redirected bytes).
func BenchmarkHop(b *testing.B) {
	requireRoot(b)
	pc := newPodCgroups(b)
	joinCgroup(b, pc.proxy)
	o := mustLoad(b, Options{ProxyCgroup: pc.proxy})
	att, err := o.Attach(Pod{Cgroup: pc.pod})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { att.Close() })
	ln := listenTCP(b, "", "tcp4", "127.0.0.1:0")

	pairs := map[string][2]*net.TCPConn{}
	for _, mode := range []string{"tcp", "skmsg"} {
		if err := o.SetAcceleration(mode == "skmsg"); err != nil {
			b.Fatal(err)
		}
		c, s := connPair(b, ln)
		if o.Accelerated(c) != (mode == "skmsg") {
			b.Fatalf("%s pair: Accelerated = %v", mode, o.Accelerated(c))
		}
		pairs[mode] = [2]*net.TCPConn{c, s}
	}

	sizes := []int{1, 1 << 10, 16 << 10, 64 << 10}
	for _, kind := range []string{"rtt", "stream"} {
		for _, size := range sizes {
			for _, mode := range []string{"tcp", "skmsg"} {
				p := pairs[mode]
				b.Run(fmt.Sprintf("%s/%s/%s", kind, sizeName(size), mode), func(b *testing.B) {
					if kind == "rtt" {
						benchRTT(b, p[0], p[1], size)
					} else {
						benchStream(b, p[0], p[1], size)
					}
				})
			}
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchRTT: the client writes size bytes, the server reads them all and
// writes them back, the client reads them all.
func benchRTT(b *testing.B, c, s *net.TCPConn, size int) {
	msg := make([]byte, size)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for range b.N {
			if _, err := io.ReadFull(s, buf); err != nil {
				done <- err
				return
			}
			if _, err := s.Write(buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// benchStream: b.N writes of size; the op ends when the reader has it all.
func benchStream(b *testing.B, c, s *net.TCPConn, size int) {
	msg := make([]byte, size)
	total := int64(b.N) * int64(size)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		var got int64
		for got < total {
			n, err := s.Read(buf)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
