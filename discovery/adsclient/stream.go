package adsclient

import (
	"fmt"
	"maps"
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// namedTypes are the types subscribed to by name, in the order a stream
// sends their subscriptions: the assignments and the route tables the
// clusters name.
var namedTypes = []string{endpointTypeURL, routeTypeURL, extensionTypeURL}

// sotwStream speaks the state-of-the-world protocol: every request
// restates its subscription and the last version accepted.
type sotwStream struct {
	c      *Client
	str    discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	nonces map[string]string // last nonce received, by type URL
	// sent is the subscription this stream last sent, by type URL (absent:
	// none).
	sent map[string][]string
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
	return s.syncNames()
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
	case endpointTypeURL, routeTypeURL, extensionTypeURL:
		switch t {
		case endpointTypeURL:
			err = s.c.st.applySotwEDS(r.GetResources())
		case routeTypeURL:
			err = s.c.st.applySotwRDS(r.GetResources())
		default:
			err = s.c.st.applyExtensions(sotwResources(r.GetResources()), false)
		}
		// Every SotW request restates the subscription.
		s.sent[t] = s.c.st.names(t)
		req.ResourceNames = s.sent[t]
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

func (s *sotwStream) syncNames() error {
	for _, t := range namedTypes {
		names := s.c.st.names(t)
		sent, started := s.sent[t]
		// An empty first request would mean "all of them".
		if (!started && len(names) == 0) || (started && slices.Equal(names, sent)) {
			continue
		}
		s.sent[t] = names
		if err := s.send(&discoveryv3.DiscoveryRequest{
			TypeUrl:       t,
			ResourceNames: names,
			VersionInfo:   s.c.st.versions[t],
			ResponseNonce: s.nonces[t],
		}); err != nil {
			return err
		}
	}
	return nil
}

// deltaStream speaks the incremental protocol: subscriptions change by
// difference, and a new stream tells the server what it already has.
type deltaStream struct {
	c   *Client
	str discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	// subscribed holds the names subscribed on this stream, by type URL
	// (absent: nothing asked for yet).
	subscribed map[string]map[string]bool
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
	return d.syncNames()
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
	case routeTypeURL:
		err = d.c.st.applyDeltaRDS(resources, r.GetRemovedResources())
	case extensionTypeURL:
		err = d.c.st.applyExtensions(resources, true)
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

func (d *deltaStream) syncNames() error {
	for _, t := range namedTypes {
		want := d.c.st.names(t)
		subscribed, started := d.subscribed[t]
		var add, remove []string
		for _, n := range want {
			if !subscribed[n] {
				add = append(add, n)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(subscribed)) {
			if !slices.Contains(want, n) {
				remove = append(remove, n)
			}
		}
		// An empty first subscription would mean "all of them".
		if len(add) == 0 && len(remove) == 0 {
			continue
		}
		req := &discoveryv3.DeltaDiscoveryRequest{
			TypeUrl:                  t,
			ResourceNamesSubscribe:   add,
			ResourceNamesUnsubscribe: remove,
		}
		if !started {
			subscribed = map[string]bool{}
			d.subscribed[t] = subscribed
			req.InitialResourceVersions = map[string]string{}
			for _, n := range add {
				if v := d.c.st.version(t, n); v != "" {
					req.InitialResourceVersions[n] = v
				}
			}
		}
		for _, n := range add {
			subscribed[n] = true
		}
		for _, n := range remove {
			delete(subscribed, n)
		}
		if err := d.send(req); err != nil {
			return err
		}
	}
	return nil
}
