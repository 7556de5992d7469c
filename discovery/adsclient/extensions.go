package adsclient

import (
	"fmt"
	"maps"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	secapi "istio.io/api/security/v1beta1"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
)

var extensionTypeURL = typeURL(&corev3.TypedExtensionConfig{})

// Inbound is the sidecar's inbound security policy, from the
// meshmeta.InboundExtensionNames extension configurations.
type Inbound struct {
	// MTLS holds the modes (Mode and each Ports entry's Mode; the allow
	// lists are empty): the workload's PeerAuthentication, DISABLE read as
	// PERMISSIVE, since sidecars keep mTLS between them.
	MTLS *config.InboundMTLS
	// Authz is the workload's RBAC filters.
	Authz *config.Authz
}

// extEntry is one accepted extension configuration.
type extEntry struct {
	value   any // *authz.Filter or *config.InboundMTLS
	version string
}

// extNames are the names of a kind subscribed to.
func (s *adsState) extNames() []string { return s.extensions }

// decodeExtension translates the i-th resource of an ECDS response.
func decodeExtension(i int, a *anypb.Any) (string, *extEntry, error) {
	var tc corev3.TypedExtensionConfig
	if err := unmarshalResource(a, &tc); err != nil {
		return "", nil, fmt.Errorf("adsclient: ECDS resources[%d]: %w", i, err)
	}
	name := tc.GetName()
	fail := func(err error) (string, *extEntry, error) {
		return name, nil, fmt.Errorf("adsclient: ECDS %s: %w", name, err)
	}
	var msg proto.Message
	switch name {
	case meshmeta.HTTPRBACAuditName, meshmeta.HTTPRBACDenyName, meshmeta.HTTPRBACAllowName:
		msg = &httprbacv3.RBAC{}
	case meshmeta.NetworkRBACAuditName, meshmeta.NetworkRBACDenyName, meshmeta.NetworkRBACAllowName:
		msg = &netrbacv3.RBAC{}
	case meshmeta.PeerAuthenticationName:
		msg = &secapi.PeerAuthentication{}
	default:
		return name, nil, nil // not one of ours: ignored
	}
	if err := unmarshalResource(tc.GetTypedConfig(), msg); err != nil {
		return fail(fmt.Errorf("typed_config: %w", err))
	}
	var e extEntry
	var err error
	switch m := msg.(type) {
	case *httprbacv3.RBAC:
		e.value, err = authz.Compile(m)
	case *netrbacv3.RBAC:
		e.value, err = authz.CompileNetwork(m)
	case *secapi.PeerAuthentication:
		e.value, err = peerModes(m)
	}
	if err != nil {
		return fail(fmt.Errorf("typed_config.%w", err))
	}
	return name, &e, nil
}

// peerModes reads an effective PeerAuthentication.
func peerModes(pa *secapi.PeerAuthentication) (*config.InboundMTLS, error) {
	if pa.GetSelector() != nil {
		return nil, fmt.Errorf("selector: the control plane resolves it (want none)")
	}
	mode := func(m secapi.PeerAuthentication_MutualTLS_Mode, def config.MTLSMode) (config.MTLSMode, error) {
		switch m {
		case secapi.PeerAuthentication_MutualTLS_STRICT:
			return config.MTLSStrict, nil
		case secapi.PeerAuthentication_MutualTLS_PERMISSIVE, secapi.PeerAuthentication_MutualTLS_DISABLE:
			return config.MTLSPermissive, nil
		case secapi.PeerAuthentication_MutualTLS_UNSET:
			return def, nil
		}
		return "", fmt.Errorf("%v unknown", m)
	}
	out := &config.InboundMTLS{}
	var err error
	if out.Mode, err = mode(pa.GetMtls().GetMode(), config.MTLSPermissive); err != nil {
		return nil, fmt.Errorf("mtls.mode: %w", err)
	}
	for _, p := range slices.Sorted(maps.Keys(pa.GetPortLevelMtls())) {
		if p == 0 || p > 65535 {
			return nil, fmt.Errorf("port_level_mtls[%d]: not a port", p)
		}
		m, err := mode(pa.GetPortLevelMtls()[p].GetMode(), out.Mode)
		if err != nil {
			return nil, fmt.Errorf("port_level_mtls[%d].mode: %w", p, err)
		}
		if out.Ports == nil {
			out.Ports = map[uint16]config.PeerAuthorization{}
		}
		out.Ports[uint16(p)] = config.PeerAuthorization{Mode: m}
	}
	return out, nil
}

// applyExtensions stores the extension configurations of a response
// (named, in delta), all or nothing. A removal is ignored, the last good
// kept, as for route configurations: the control plane always sends
// every name, and a missing policy must not read as "allow everything".
func (s *adsState) applyExtensions(resources []*discoveryResource, delta bool) error {
	want := map[string]bool{}
	for _, n := range s.extensions {
		want[n] = true
	}
	next := map[string]*extEntry{}
	var errs errorList
	for i, r := range resources {
		if delta && !want[r.name] {
			continue
		}
		name, e, err := decodeExtension(i, r.resource)
		switch {
		case !want[name]:
		case err != nil:
			errs.add(err)
		case delta && name != r.name:
			errs.add(fmt.Errorf("adsclient: ECDS resources[%d]: resource %q holds extension %q", i, r.name, name))
		case next[name] != nil:
			errs.add(fmt.Errorf("adsclient: ECDS resources[%d]: duplicate extension %q", i, name))
		default:
			e.version = r.version
			next[name] = e
		}
	}
	if err := errs.err(); err != nil {
		return err
	}
	if len(next) > 0 {
		maps.Copy(s.exts, next)
		s.extGen++
	}
	return nil
}

// inbound assembles the policy, and whether every extension subscribed to
// has arrived.
func (s *adsState) inbound() (Inbound, bool) {
	for _, n := range s.extensions {
		if s.exts[n] == nil {
			return Inbound{}, false
		}
	}
	if len(s.extensions) == 0 {
		return Inbound{}, true
	}
	filter := func(name string) *authz.Filter {
		if e := s.exts[name]; e != nil {
			return e.value.(*authz.Filter)
		}
		return &authz.Filter{}
	}
	in := Inbound{Authz: &config.Authz{
		HTTP:    authz.Chain{filter(meshmeta.HTTPRBACAuditName), filter(meshmeta.HTTPRBACDenyName), filter(meshmeta.HTTPRBACAllowName)},
		Network: authz.Chain{filter(meshmeta.NetworkRBACAuditName), filter(meshmeta.NetworkRBACDenyName), filter(meshmeta.NetworkRBACAllowName)},
	}}
	if e := s.exts[meshmeta.PeerAuthenticationName]; e != nil {
		in.MTLS = e.value.(*config.InboundMTLS)
	}
	return in, true
}
