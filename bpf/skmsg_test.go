package bpf

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connPair dials ln and returns both ends.
func connPair(t testing.TB, ln *net.TCPListener) (client, server *net.TCPConn) {
	t.Helper()
	client, err := dialTCP("", "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// echo copies everything server reads back to it, until EOF. It copies
// with Read and Write: io.Copy between TCP sockets would splice(2), see
// TestSpliceWithAcceleration.
func echo(server *net.TCPConn) {
	go func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				server.CloseWrite()
				return
			}
		}
	}()
}

// roundTrip writes total bytes to c in writes of size and reads them back
// (from an echoing peer), checking the content.
func roundTrip(t testing.TB, c *net.TCPConn, size, total int) {
	t.Helper()
	msg := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	errc := make(chan error, 1)
	go func() {
		for sent := 0; sent < total; sent += size {
			if _, err := c.Write(msg); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, size)
	for got := 0; got < total; got += size {
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("read back after %d bytes: %v", got, err)
		}
		if !bytes.Equal(buf, msg) {
			t.Fatalf("bytes %d..%d came back changed", got, got+size)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func bytesAcked(t testing.TB, c *net.TCPConn) uint64 {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if err != nil {
		t.Fatal(err)
	}
	return info.Bytes_acked
}

// TestSockmapAcceleration: sockops puts local sockets of the pod into the
// sockhash and sk_msg moves every write to the peer's receive queue: the
// counted bytes match the bytes written, and TCP itself carries none of them
// (bytes_acked stays at its handshake value). A socket whose peer is not in
// the sockhash passes to TCP and loses nothing.
func TestSockmapAcceleration(t *testing.T) {
	requireRoot(t)
	pc := newPodCgroups(t)
	// Created before joining the pod: its accepted sockets are outside it.
	outside := listenTCP(t, "", "tcp4", "127.0.0.1:0")
	joinCgroup(t, pc.proxy)
	o := mustLoad(t, Options{ProxyCgroup: pc.proxy, Accelerate: true})
	att, err := o.Attach(Pod{Cgroup: pc.pod})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	inside4 := listenTCP(t, "", "tcp4", "127.0.0.1:0")
	inside6 := listenTCP(t, "", "tcp6", "[::1]:0")

	sizes := []int{1, 1024, 16 << 10, 64 << 10}
	const total = 1 << 20
	for _, ln := range []*net.TCPListener{inside4, inside6} {
		t.Run("pair in the sockhash "+ln.Addr().String(), func(t *testing.T) {
			before := mustCounters(t, o)
			client, server := connPair(t, ln)
			echo(server)
			acked := bytesAcked(t, client)
			var sent uint64
			for _, size := range sizes {
				n := min(total, size*2000)
				roundTrip(t, client, size, n)
				sent += 2 * uint64(n) // there and back
			}
			c := diffCounters(mustCounters(t, o), before)
			t.Logf("%d bytes each way; counters: inserts=%d redirected=%d msgs/%d bytes passed=%d", sent/2, c.SockhashInserts, c.MsgRedirected, c.MsgRedirectedBytes, c.MsgPassed)
			if c.SockhashInserts != 2 {
				t.Errorf("%d sockhash inserts, want 2 (both ends)", c.SockhashInserts)
			}
			if c.MsgRedirectedBytes != sent || c.MsgPassed != 0 {
				t.Errorf("redirected %d bytes (passed %d msgs), want all %d", c.MsgRedirectedBytes, c.MsgPassed, sent)
			}
			if d := bytesAcked(t, client) - acked; d != 0 {
				t.Errorf("TCP acked %d bytes of the client's: the data did not go through the redirect", d)
			}
			if f, err := o.MapFill(); err != nil || f.SockPairs < 2 {
				t.Errorf("MapFill = %+v, %v; want both sockets", f, err)
			}
			if !o.Accelerated(client) || !o.Accelerated(server) {
				t.Errorf("Accelerated = %v, %v; want true for both ends", o.Accelerated(client), o.Accelerated(server))
			}
		})
	}
	t.Run("peer not in the sockhash: passed to TCP", func(t *testing.T) {
		before := mustCounters(t, o)
		client, server := connPair(t, outside)
		echo(server)
		roundTrip(t, client, 16<<10, total)
		c := diffCounters(mustCounters(t, o), before)
		if c.SockhashInserts != 1 || c.MsgRedirected != 0 || c.MsgPassedBytes != total {
			t.Errorf("want 1 insert (the client), 0 redirected, %d bytes passed; counters: %+v", total, c)
		}
		if bytesAcked(t, client) < total {
			t.Errorf("TCP acked %d bytes, want all %d", bytesAcked(t, client), total)
		}
		if !o.Accelerated(client) || o.Accelerated(server) {
			t.Errorf("Accelerated = %v, %v; want true for the client only", o.Accelerated(client), o.Accelerated(server))
		}
	})
	// The reason Accelerated exists: splice(2) reads the socket's receive
	// queue, and redirected bytes are not there. Should a kernel fix that,
	// this fails and the advice in Accelerated can go.
	t.Run("splice sees no redirected bytes", func(t *testing.T) {
		client, server := connPair(t, inside4)
		other, _ := connPair(t, outside)
		if _, err := client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		server.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := io.Copy(other, server) // TCPConn to TCPConn: splice
		if n != 0 {
			t.Fatalf("splice copied %d bytes (%v): the kernel now splices redirected data", n, err)
		}
		server.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 5)
		if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("read %q, %v; want hello", buf, err)
		}
	})
	t.Run("acceleration off: new pairs stay out", func(t *testing.T) {
		if err := o.SetAcceleration(false); err != nil {
			t.Fatal(err)
		}
		defer o.SetAcceleration(true)
		before := mustCounters(t, o)
		client, server := connPair(t, inside4)
		echo(server)
		roundTrip(t, client, 1024, 64<<10)
		if c := diffCounters(mustCounters(t, o), before); c.SockhashInserts != 0 || c.MsgRedirected+c.MsgPassed != 0 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("closed sockets leave the sockhash", func(t *testing.T) {
		client, server := connPair(t, inside4)
		client.Close()
		server.Close()
		// The subtests' cleanups closed the other pairs already.
		waitFor(t, "sock_pairs", func() (bool, string) {
			f, err := o.MapFill()
			if err != nil {
				t.Fatal(err)
			}
			return f.SockPairs == 0, fmt.Sprintf("%d entries", f.SockPairs)
		})
	})
}
