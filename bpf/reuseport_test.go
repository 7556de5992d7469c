package bpf

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenReusePortGroup opens n plain-TCP SO_REUSEPORT listeners on one
// loopback port.
func listenReusePortGroup(t *testing.T, n int) []*net.TCPListener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	lc.SetMultipathTCP(false)
	addr := "127.0.0.1:0"
	var lns []*net.TCPListener
	for range n {
		ln, err := lc.Listen(context.Background(), "tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns = append(lns, ln.(*net.TCPListener))
		addr = ln.Addr().String()
	}
	return lns
}

// allowedCPUs is the test process's CPU affinity set.
func allowedCPUs(t *testing.T) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

// landings dials addr perConn times from each CPU (a thread pinned to it)
// and returns, per worker, the CPUs whose connections it accepted.
func landings(t *testing.T, lns []*net.TCPListener, cpus []int, perCPU int) (hits, misses int) {
	t.Helper()
	type landing struct{ worker, cpu int }
	got := make(chan landing, len(cpus)*perCPU)
	for i, ln := range lns {
		go acceptLoop(ln, func(c net.Conn) {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			var b [1]byte
			if _, err := c.Read(b[:]); err == nil {
				got <- landing{i, int(b[0])}
			}
		})
	}
	addr := lns[0].Addr().String()
	errs := make(chan error, len(cpus))
	for _, cpu := range cpus {
		go func() {
			// The pinned thread is never unlocked: Go ends it with the
			// goroutine instead of reusing it with the narrowed affinity.
			runtime.LockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs <- fmt.Errorf("pin to CPU %d: %w", cpu, err)
				return
			}
			for range perCPU {
				// On loopback the SYN is handled in softirq on the sending CPU.
				c, err := dialTCP("", "tcp4", addr)
				if err != nil {
					errs <- err
					return
				}
				c.Write([]byte{byte(cpu)})
				c.Close()
			}
			errs <- nil
		}()
	}
	for range cpus {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range len(cpus) * perCPU {
		select {
		case l := <-got:
			if l.worker == l.cpu%len(lns) {
				hits++
			} else {
				misses++
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d connections accepted", hits+misses, len(cpus)*perCPU)
		}
	}
	return hits, misses
}

// TestReuseportByCPU: a SO_REUSEPORT group of one listener per CPU; with the
// group registered, every connection lands on the worker of the CPU its
// client ran on (pinned per connection), where the kernel's hash alone
// scatters them.
func TestReuseportByCPU(t *testing.T) {
	requireRoot(t)
	cpus := allowedCPUs(t)
	n := runtime.NumCPU()
	if len(cpus) < 2 {
		t.Fatalf("TestReuseportByCPU needs 2 CPUs to tell workers apart; this process may use %v", cpus)
	}
	pc := newPodCgroups(t)
	o := mustLoad(t, Options{ProxyCgroup: pc.proxy})
	const perCPU = 100

	lns := listenReusePortGroup(t, n)
	g, err := o.RegisterWorkers(lns)
	if err != nil {
		t.Fatal(err)
	}
	hits, misses := landings(t, lns, cpus, perCPU)
	t.Logf("with the program: %d of %d connections on the worker of their CPU (%d workers, CPUs %v)", hits, hits+misses, n, cpus)
	if misses != 0 {
		t.Errorf("%d connections landed on another CPU's worker", misses)
	}
	if c := mustCounters(t, o); c.ReuseportSelected != uint64(hits+misses) || c.ReuseportFallback != 0 {
		t.Errorf("counters: %+v", c)
	}

	if _, err := o.RegisterWorkers(lns); err == nil {
		t.Error("a second group on the same port was accepted")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// After Close the kernel's hash decides again (the baseline).
	lns2 := listenReusePortGroup(t, n)
	hits2, misses2 := landings(t, lns2, cpus, perCPU)
	t.Logf("kernel hash: %d of %d on the worker of their CPU", hits2, hits2+misses2)
	if c := mustCounters(t, o); c.ReuseportSelected != uint64(hits+misses) {
		t.Errorf("the program still ran after Close: %+v", c)
	}

	t.Run("listener without SO_REUSEPORT is refused", func(t *testing.T) {
		ln := listenTCP(t, "", "tcp4", "127.0.0.1:0")
		if _, err := o.RegisterWorkers([]*net.TCPListener{ln}); err == nil {
			t.Error("RegisterWorkers accepted a listener without SO_REUSEPORT")
		}
	})
}
