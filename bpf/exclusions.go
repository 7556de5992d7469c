package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// Exclusions are the traffic the sidecar leaves alone, set at run time
// (from annotations or configuration).
type Exclusions struct {
	// OutboundPorts are destination ports whose connects are not redirected.
	OutboundPorts []uint16
	// OutboundCIDRs are destination ranges whose connects are not redirected.
	OutboundCIDRs []netip.Prefix
	// InboundPorts are local ports inbound steering leaves to whoever
	// listens on them (the sidecar's own ports are always left alone).
	InboundPorts []uint16
}

// SetExclusions replaces the exclusions. Entries that stay are never
// removed on the way, so a connect racing the update sees either set.
func (o *Objects) SetExclusions(e Exclusions) error {
	if n := max(len(e.OutboundPorts), len(e.OutboundCIDRs), len(e.InboundPorts)+len(o.opts.ProxyPorts)); n > maxExclusions {
		return fmt.Errorf("bpf: set exclusions: %d entries, at most %d of each kind", n, maxExclusions)
	}
	for _, p := range e.OutboundCIDRs {
		if !p.IsValid() {
			return fmt.Errorf("bpf: set exclusions: invalid CIDR %s", p)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.excl
	if err := syncSet(o.maps.outExcludedPorts, old.OutboundPorts, e.OutboundPorts, func(p uint16) any { return p }); err != nil {
		return fmt.Errorf("bpf: set excluded outbound ports %v: %w", e.OutboundPorts, err)
	}
	if err := syncSet(o.maps.outExcludedCIDRs, old.OutboundCIDRs, e.OutboundCIDRs, func(p netip.Prefix) any { return newCIDRKey(p) }); err != nil {
		return fmt.Errorf("bpf: set excluded outbound CIDRs %v: %w", e.OutboundCIDRs, err)
	}
	if err := o.writeInboundBypass(e); err != nil {
		return err
	}
	o.excl = Exclusions{
		OutboundPorts: slices.Clone(e.OutboundPorts),
		OutboundCIDRs: slices.Clone(e.OutboundCIDRs),
		InboundPorts:  slices.Clone(e.InboundPorts),
	}
	return nil
}

// Exclusions returns the exclusions in force.
func (o *Objects) Exclusions() Exclusions {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Exclusions{
		OutboundPorts: slices.Clone(o.excl.OutboundPorts),
		OutboundCIDRs: slices.Clone(o.excl.OutboundCIDRs),
		InboundPorts:  slices.Clone(o.excl.InboundPorts),
	}
}

// writeInboundBypass makes in_bypass_ports the excluded inbound ports plus
// the sidecar's own.
func (o *Objects) writeInboundBypass(e Exclusions) error {
	old := append(slices.Clone(o.excl.InboundPorts), o.opts.ProxyPorts...)
	next := append(slices.Clone(e.InboundPorts), o.opts.ProxyPorts...)
	if err := syncSet(o.maps.inBypass, old, next, func(p uint16) any { return p }); err != nil {
		return fmt.Errorf("bpf: set excluded inbound ports %v: %w", e.InboundPorts, err)
	}
	return nil
}

// syncSet makes the set map m hold next instead of old: additions first,
// then removals of what is no longer in next.
func syncSet[T comparable](m *ebpf.Map, old, next []T, key func(T) any) error {
	want := map[any]bool{}
	for _, v := range next {
		k := key(v)
		want[k] = true
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("add %v: %w", v, err)
		}
	}
	for _, v := range old {
		if k := key(v); !want[k] {
			if err := m.Delete(k); err != nil && !isNotExist(err) {
				return fmt.Errorf("remove %v: %w", v, err)
			}
		}
	}
	return nil
}

func isNotExist(err error) bool { return errors.Is(err, ebpf.ErrKeyNotExist) }
