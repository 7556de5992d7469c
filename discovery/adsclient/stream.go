package adsclient

import (
	"fmt"
	"maps"
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// sotwStream speaks the state-of-the-world protocol: every request
// restates its subscription and the last version accepted.
type sotwStream struct {
	c      *Client
	str    discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	nonces map[string]string // last nonce received, by type URL
	// edsSent is the EDS subscription this stream last sent (nil: none).
	edsSent []string
}

func (s *sotwStream) subscribe() error {
	// Empty resource_names: all clusters (legacy wildcard, which every
	// server understands).
	if err := s.send(&discoveryv3.DiscoveryRequest{
		TypeUrl:     clusterTypeURL,
		VersionInfo: s.c.st.versions[clusterTypeURL],
	}); err != nil {
		return err
	}
	return s.syncEDS()
}

func (s *sotwStream) recv() (any, error) { return s.str.Recv() }

func (s *sotwStream) send(req any) error {
	r := req.(*discoveryv3.DiscoveryRequest)
	r.Node = s.c.opts.Node
	if err := s.str.Send(r); err != nil {
		return fmt.Errorf("adsclient: send %s request: %w", r.GetTypeUrl(), err)
	}
	return nil
}

func (s *sotwStream) handle(resp any) (any, string, error) {
	r := resp.(*discoveryv3.DiscoveryResponse)
	t := r.GetTypeUrl()
	s.nonces[t] = r.GetNonce()
	var err error
	req := &discoveryv3.DiscoveryRequest{TypeUrl: t, ResponseNonce: r.GetNonce()}
	switch t {
	case clusterTypeURL:
		err = s.c.st.applySotwCDS(r.GetResources())
	case endpointTypeURL:
		err = s.c.st.applySotwEDS(r.GetResources())
		// Every SotW request restates the subscription.
		s.edsSent = s.c.st.edsNames()
		req.ResourceNames = s.edsSent
	default:
		s.c.log.Warn("ads: ignoring a response of a type never asked for", "type", t)
		return nil, t, nil
	}
	if err == nil {
		s.c.st.versions[t] = r.GetVersionInfo()
	} else {
		req.ErrorDetail = nackStatus(err)
	}
	req.VersionInfo = s.c.st.versions[t]
	return req, t, err
}

func (s *sotwStream) syncEDS() error {
	names := s.c.st.edsNames()
	// An empty first EDS request would mean "all assignments".
	if (s.edsSent == nil && len(names) == 0) || (s.edsSent != nil && slices.Equal(names, s.edsSent)) {
		return nil
	}
	s.edsSent = names
	return s.send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       endpointTypeURL,
		ResourceNames: names,
		VersionInfo:   s.c.st.versions[endpointTypeURL],
		ResponseNonce: s.nonces[endpointTypeURL],
	})
}

// deltaStream speaks the incremental protocol: subscriptions change by
// difference, and a new stream tells the server what it already has.
type deltaStream struct {
	c          *Client
	str        discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	subscribed map[string]bool // EDS names subscribed on this stream
	edsStarted bool
}

func (d *deltaStream) subscribe() error {
	versions := make(map[string]string, len(d.c.st.clusters))
	for name, e := range d.c.st.clusters {
		versions[name] = e.version
	}
	if err := d.send(&discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:                 clusterTypeURL,
		InitialResourceVersions: versions,
	}); err != nil {
		return err
	}
	return d.syncEDS()
}

func (d *deltaStream) recv() (any, error) { return d.str.Recv() }

func (d *deltaStream) send(req any) error {
	r := req.(*discoveryv3.DeltaDiscoveryRequest)
	r.Node = d.c.opts.Node
	if err := d.str.Send(r); err != nil {
		return fmt.Errorf("adsclient: send delta %s request: %w", r.GetTypeUrl(), err)
	}
	return nil
}

func (d *deltaStream) handle(resp any) (any, string, error) {
	r := resp.(*discoveryv3.DeltaDiscoveryResponse)
	t := r.GetTypeUrl()
	resources := make([]*discoveryResource, len(r.GetResources()))
	for i, res := range r.GetResources() {
		resources[i] = &discoveryResource{name: res.GetName(), version: res.GetVersion(), resource: res.GetResource()}
	}
	var err error
	switch t {
	case clusterTypeURL:
		err = d.c.st.applyDeltaCDS(resources, r.GetRemovedResources())
	case endpointTypeURL:
		err = d.c.st.applyDeltaEDS(resources, r.GetRemovedResources())
	default:
		d.c.log.Warn("ads: ignoring a delta response of a type never asked for", "type", t)
		return nil, t, nil
	}
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: r.GetNonce()}
	if err != nil {
		req.ErrorDetail = nackStatus(err)
	}
	return req, t, err
}

func (d *deltaStream) syncEDS() error {
	want := d.c.st.edsNames()
	var add, remove []string
	for _, n := range want {
		if !d.subscribed[n] {
			add = append(add, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(d.subscribed)) {
		if !slices.Contains(want, n) {
			remove = append(remove, n)
		}
	}
	// An empty first subscription would mean "all assignments".
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	req := &discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:                  endpointTypeURL,
		ResourceNamesSubscribe:   add,
		ResourceNamesUnsubscribe: remove,
	}
	if !d.edsStarted {
		d.edsStarted = true
		req.InitialResourceVersions = map[string]string{}
		for _, n := range add {
			if e, ok := d.c.st.clas[n]; ok && e.version != "" {
				req.InitialResourceVersions[n] = e.version
			}
		}
	}
	for _, n := range add {
		d.subscribed[n] = true
	}
	for _, n := range remove {
		delete(d.subscribed, n)
	}
	return d.send(req)
}
