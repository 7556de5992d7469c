package testtool

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// Ports handed out by FreePorts in this process (never twice).
var (
	portsMu sync.Mutex
	handed  = map[int]bool{}
)

// FreePorts returns n ports free on host now, for servers a test starts
// later. They come from below the kernel's ephemeral range
// (ip_local_port_range) where it leaves room, 20000-29999: a port the
// kernel picks for a listener on port 0 comes from that range, and so
// does the source port of every outgoing connection, so one picked that
// way can be taken by the time the server binds it ("address already in
// use"). 20000-29999 keeps clear of the ports Kubernetes and meshlet
// listen on and of the NodePort range.
func FreePorts(t testing.TB, host string, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	if !belowEphemeral() {
		// The range may be the kernel's: its choice, as before.
		for range n {
			l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
			if err != nil {
				t.Fatalf("a free port on %s: %v", host, err)
			}
			ports = append(ports, l.Addr().(*net.TCPAddr).Port)
			defer l.Close()
		}
		return ports
	}
	for tries := 0; len(ports) < n; tries++ {
		if tries == 10000 {
			t.Fatalf("no free port on %s in %d-%d after %d tries", host, portsLow, portsHigh-1, tries)
		}
		p := portsLow + rand.IntN(portsHigh-portsLow)
		if handed[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}
		l.Close()
		handed[p] = true
		ports = append(ports, p)
	}
	return ports
}

const portsLow, portsHigh = 20000, 30000

// belowEphemeral reports whether the kernel's ephemeral range starts at or
// above portsHigh.
func belowEphemeral() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return false
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return false
	}
	return lo >= portsHigh
}
