package bpf

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// Counters are the programs' event counts since Load, summed over CPUs. The
// field order is the counter index order of include/meshlet.h (enum counter).
type Counters struct {
	Connects          uint64 // TCP connects seen by connect4/6
	Redirected        uint64 // ... rewritten to the outbound listener
	BypassProxyCgroup uint64 // ... made by the sidecar's cgroup
	BypassProxyUID    uint64 // ... made by the sidecar's uid
	BypassLoopback    uint64 // ... to a loopback or unspecified address
	BypassPort        uint64 // ... to an excluded port
	BypassCIDR        uint64 // ... to an excluded range
	SaveErrors        uint64 // ... left alone: the original destination could not be saved

	Rekeyed     uint64 // original destinations moved to the peer-keyed map
	RekeyErrors uint64

	OrigDstHits   uint64 // SO_ORIGINAL_DST answered
	OrigDstMisses uint64 // SO_ORIGINAL_DST asked for a connection not redirected
	PeernameHits  uint64 // getpeername answered with the dialled address

	ReleasedCookie uint64 // by-cookie entries deleted when the app's socket closed
	ReleasedPeer   uint64 // by-peer entries deleted when the sidecar's socket closed

	SockhashInserts uint64 // sockets put into the acceleration sockhash
	SockhashErrors  uint64

	MsgRedirected      uint64 // sk_msg messages moved to the peer socket
	MsgRedirectedBytes uint64
	MsgPassed          uint64 // sk_msg messages sent through TCP (peer not in the sockhash)
	MsgPassedBytes     uint64

	LookupSteered      uint64 // inbound connections handed to the inbound listener
	LookupBypassed     uint64 // ... left alone (loopback, self, excluded or own port)
	LookupNoListener   uint64 // ... left alone: no inbound listener registered
	LookupAssignErrors uint64

	ReuseportSelected uint64 // connections given to the worker of their CPU
	ReuseportFallback uint64 // ... left to the kernel's hash
}

// numCounters is C_MAX in include/meshlet.h.
var numCounters = reflect.TypeFor[Counters]().NumField()

// Counters reads the counters.
func (o *Objects) Counters() (Counters, error) {
	var c Counters
	v := reflect.ValueOf(&c).Elem()
	var perCPU []uint64
	for i := range numCounters {
		if err := o.maps.counters.Lookup(uint32(i), &perCPU); err != nil {
			return Counters{}, fmt.Errorf("bpf: read counter %s: %w", v.Type().Field(i).Name, err)
		}
		var sum uint64
		for _, n := range perCPU {
			sum += n
		}
		v.Field(i).SetUint(sum)
	}
	return c, nil
}

// MapFill is how many entries the connection maps hold.
type MapFill struct {
	OrigByCookie int // original destinations of open app sockets (getpeername reads them)
	OrigByPeer   int // original destinations the sidecar may still ask for
	SockPairs    int // sockets in the acceleration sockhash
	Capacity     int // entries each of them holds at most
}

// MapFill counts the entries of the connection maps (a walk over each map:
// for metrics scrapes, not the data path).
func (o *Objects) MapFill() (MapFill, error) {
	f := MapFill{Capacity: maxConns}
	for _, m := range []struct {
		name string
		m    *ebpf.Map
		n    *int
	}{
		{"orig_by_cookie", o.maps.origByCookie, &f.OrigByCookie},
		{"orig_by_peer", o.maps.origByPeer, &f.OrigByPeer},
		{"sock_pairs", o.maps.sockPairs, &f.SockPairs},
	} {
		n, err := countKeys(m.m)
		if err != nil {
			return MapFill{}, fmt.Errorf("bpf: count entries of %s: %w", m.name, err)
		}
		*m.n = n
	}
	return f, nil
}

func countKeys(m *ebpf.Map) (int, error) {
	var prev any // nil: start from the first key
	next := make([]byte, m.KeySize())
	n := 0
	// A key deleted during the walk restarts it; the bound keeps a busy map
	// from holding the caller forever.
	for limit := 2 * int(m.MaxEntries()); n < limit; n++ {
		if err := m.NextKey(prev, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return n, nil
			}
			return n, err
		}
		prev = append([]byte(nil), next...)
	}
	return n, nil
}
