package xds

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	secapi "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
)

// DefaultRootNamespace is Istio's root namespace: policies there without
// a selector apply mesh-wide, so an Istio mesh's own stay in force.
const DefaultRootNamespace = "istio-system"

// MTLSModeAnnotation is the pod annotation that overrides every
// PeerAuthentication for the pod (webhook's MTLSModeAnnotation, repeated
// so discovery does not depend on the webhook package).
const MTLSModeAnnotation = "meshlet.io/mtls-mode"

// UpsertPeerAuthentication adds or replaces a PeerAuthentication in the
// server's own store.
func (s *Server) UpsertPeerAuthentication(p *securityv1.PeerAuthentication) {
	s.peerAuthChanged(replace(s.own.peerAuths, p), p)
}

// DeletePeerAuthentication removes one from the server's own store.
func (s *Server) DeletePeerAuthentication(key types.NamespacedName) {
	s.peerAuthChanged(remove[*securityv1.PeerAuthentication](s.own.peerAuths, key.String()), nil)
}

// UpsertAuthorizationPolicy adds or replaces an AuthorizationPolicy in
// the server's own store.
func (s *Server) UpsertAuthorizationPolicy(p *securityv1.AuthorizationPolicy) {
	replace(s.own.authzPolicies, p)
	s.policyChanged()
}

// DeleteAuthorizationPolicy removes one from the server's own store.
func (s *Server) DeleteAuthorizationPolicy(key types.NamespacedName) {
	remove[*securityv1.AuthorizationPolicy](s.own.authzPolicies, key.String())
	s.policyChanged()
}

// policyChanged drops the translated policies; every sidecar's are
// worked out again at the next rebuild.
func (s *Server) policyChanged() {
	s.mu.Lock()
	s.policiesDirty = true
	s.mu.Unlock()
	s.changed()
}

// peerAuthChanged is policyChanged for a PeerAuthentication before and
// after a change (nil: none), already in the store. While a DISABLE is in
// play (this policy said or says it, or another one does: a STRICT over a
// DISABLE changes what it resolves to as much), which endpoints clients
// reach in plaintext may have changed: the Services of the policy's
// namespace are translated again, every Service for one of the root
// namespace.
func (s *Server) peerAuthChanged(old, cur *securityv1.PeerAuthentication) {
	p := cmp.Or(cur, old)
	s.mu.Lock()
	if p != nil && (saysDisable(old) || saysDisable(cur) || s.disableInUseLocked()) {
		if p.Namespace == s.rootNamespace() {
			s.allDirty = true
		} else if svcs, err := s.src.services.Services(p.Namespace).List(labels.Everything()); err == nil {
			for _, svc := range svcs {
				s.dirty[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
			}
		}
	}
	s.mu.Unlock()
	s.policyChanged()
}

// saysDisable reports whether a PeerAuthentication sets DISABLE anywhere.
func saysDisable(p *securityv1.PeerAuthentication) bool {
	if p == nil {
		return false
	}
	if p.Spec.GetMtls().GetMode() == secapi.PeerAuthentication_MutualTLS_DISABLE {
		return true
	}
	for _, m := range p.Spec.GetPortLevelMtls() {
		if m.GetMode() == secapi.PeerAuthentication_MutualTLS_DISABLE {
			return true
		}
	}
	return false
}

// disableInUseLocked says whether any workload can resolve to DISABLE:
// the mesh's default is, or a PeerAuthentication says it. Without, no
// endpoint is looked up (plaintextLocked) at all.
func (s *Server) disableInUseLocked() bool {
	if strings.EqualFold(s.opts.MTLSMode, "DISABLE") {
		return true
	}
	for _, o := range s.src.peerAuths.List() {
		if p, ok := o.(*securityv1.PeerAuthentication); ok && saysDisable(p) {
			return true
		}
	}
	return false
}

// plaintextLocked returns what says whether a meshed pod's
// PeerAuthentication resolves to DISABLE for a container port: its
// clients then reach it there in plaintext (Istio's auto mTLS follows the
// destination's PeerAuthentication the same way; Options.MTLSMode DISABLE
// makes every port so). Each pod's modes are resolved once per func, one
// translation pass.
func (s *Server) plaintextLocked() func(types.NamespacedName, uint16) bool {
	type modes struct {
		mode  secapi.PeerAuthentication_MutualTLS_Mode
		ports map[uint32]secapi.PeerAuthentication_MutualTLS_Mode
	}
	seen := map[types.NamespacedName]modes{}
	return func(key types.NamespacedName, port uint16) bool {
		m, ok := seen[key]
		if !ok {
			pod, err := s.src.pods.Pods(key.Namespace).Get(key.Name)
			if err != nil {
				pod = nil
			}
			m.mode, m.ports = s.peerAuthenticationFor(key.Namespace, pod)
			seen[key] = m
		}
		if pm, ok := m.ports[uint32(port)]; ok {
			return pm == secapi.PeerAuthentication_MutualTLS_DISABLE
		}
		return m.mode == secapi.PeerAuthentication_MutualTLS_DISABLE
	}
}

// workloadPolicies is one set of policies' translation, shared by every
// sidecar the same policies select.
type workloadPolicies struct {
	ext []hashed // the meshmeta.InboundExtensionNames resources
	// errs are the policies that did not translate (the workload then
	// fails closed).
	errs map[policyRef]error
}

// inboundPolicyLocked returns the key and the resources of the policies
// that apply to sidecar nodeID: its pod's when the node id names a known
// pod (<pod>.<namespace>), else those of its namespace without a
// selector.
func (s *Server) inboundPolicyLocked(nodeID string) (string, *workloadPolicies) {
	if s.policies == nil {
		s.policies = map[string]*workloadPolicies{}
	}
	ref, _ := podOfNode(nodeID)
	var pod *corev1.Pod
	if ref.Name != "" {
		pod, _ = s.src.pods.Pods(ref.Namespace).Get(ref.Name)
	}
	mode, ports := s.peerAuthenticationFor(ref.Namespace, pod)
	aps := s.authorizationPoliciesFor(ref.Namespace, pod)
	var b strings.Builder
	b.WriteString(mode.String())
	for _, p := range slices.Sorted(maps.Keys(ports)) {
		fmt.Fprintf(&b, ",%d=%s", p, ports[p])
	}
	for _, ap := range aps {
		// The generation, not the resourceVersion, which status writes
		// change too.
		fmt.Fprintf(&b, ";%s/%s@%d", ap.Namespace, ap.Name, ap.Generation)
	}
	key := b.String()
	if wp, ok := s.policies[key]; ok {
		return key, wp
	}
	wp := s.translatePolicies(mode, ports, aps)
	s.policies[key] = wp
	for ref, err := range wp.errs {
		s.log.Warn("authorization policy not applied; its workloads allow nothing", "policy", ref.String(), "error", err)
	}
	return key, wp
}

func (s *Server) translatePolicies(mode secapi.PeerAuthentication_MutualTLS_Mode, ports map[uint32]secapi.PeerAuthentication_MutualTLS_Mode,
	aps []*securityv1.AuthorizationPolicy) *workloadPolicies {
	pa := &secapi.PeerAuthentication{Mtls: &secapi.PeerAuthentication_MutualTLS{Mode: mode}}
	for p, m := range ports {
		if pa.PortLevelMtls == nil {
			pa.PortLevelMtls = map[uint32]*secapi.PeerAuthentication_MutualTLS{}
		}
		pa.PortLevelMtls[p] = &secapi.PeerAuthentication_MutualTLS{Mode: m}
	}
	ips := make([]istioPolicy, 0, len(aps))
	for _, ap := range aps {
		ips = append(ips, istioPolicy{Ref: policyRef{ap.Namespace, ap.Name}, Spec: &ap.Spec})
	}
	rbac, errs := translateAuthorizationPolicies(ips)
	wp := &workloadPolicies{errs: errs}
	ext := map[string]proto.Message{
		meshmeta.PeerAuthenticationName: pa,
		meshmeta.HTTPRBACAuditName:      rbac.HTTP[rbacAudit], meshmeta.HTTPRBACDenyName: rbac.HTTP[rbacDeny], meshmeta.HTTPRBACAllowName: rbac.HTTP[rbacAllow],
		meshmeta.NetworkRBACAuditName: rbac.Network[rbacAudit], meshmeta.NetworkRBACDenyName: rbac.Network[rbacDeny],
		meshmeta.NetworkRBACAllowName: rbac.Network[rbacAllow],
	}
	for _, name := range meshmeta.InboundExtensionNames {
		a, err := anypb.New(ext[name])
		if err != nil {
			panic(fmt.Sprintf("xds: %s does not encode: %v", name, err)) // built here: cannot happen
		}
		wp.ext = append(wp.ext, hashResource(name, &corev3.TypedExtensionConfig{Name: name, TypedConfig: a}))
	}
	return wp
}

// peerAuthenticationFor resolves a workload's mTLS modes as Istio does:
// the pod's meshlet.io/mtls-mode annotation over everything, then the
// oldest workload policy whose selector matches the pod (its
// port_level_mtls for those ports), the oldest of the namespace without
// a selector, the oldest mesh-wide one (root namespace, no selector),
// each UNSET inheriting from the next, and last the injector's default
// (PERMISSIVE unless set).
func (s *Server) peerAuthenticationFor(ns string, pod *corev1.Pod) (secapi.PeerAuthentication_MutualTLS_Mode, map[uint32]secapi.PeerAuthentication_MutualTLS_Mode) {
	mode := secapi.PeerAuthentication_MutualTLS_PERMISSIVE
	if m, ok := secapi.PeerAuthentication_MutualTLS_Mode_value[strings.ToUpper(s.opts.MTLSMode)]; ok && m != 0 {
		mode = secapi.PeerAuthentication_MutualTLS_Mode(m)
	}
	if pod != nil {
		// STRICT or PERMISSIVE, as the webhook admits it; anything else
		// (an annotation edited after injection) is not an override.
		switch m := secapi.PeerAuthentication_MutualTLS_Mode_value[strings.ToUpper(strings.TrimSpace(pod.Annotations[MTLSModeAnnotation]))]; secapi.PeerAuthentication_MutualTLS_Mode(m) {
		case secapi.PeerAuthentication_MutualTLS_STRICT, secapi.PeerAuthentication_MutualTLS_PERMISSIVE:
			return secapi.PeerAuthentication_MutualTLS_Mode(m), nil
		}
	}
	var mesh, namespace, workload *securityv1.PeerAuthentication
	pick := func(cur **securityv1.PeerAuthentication, p *securityv1.PeerAuthentication) {
		if *cur == nil || older(p, *cur) {
			*cur = p
		}
	}
	for _, p := range indexed[*securityv1.PeerAuthentication](s.src.peerAuths, s.rootNamespace(), ns) {
		sel := p.Spec.GetSelector().GetMatchLabels()
		switch {
		case p.Namespace == s.rootNamespace() && len(sel) == 0:
			pick(&mesh, p)
		case p.Namespace != ns:
		case len(sel) == 0:
			pick(&namespace, p)
		case pod != nil && labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)):
			pick(&workload, p)
		}
	}
	for _, p := range []*securityv1.PeerAuthentication{mesh, namespace, workload} {
		if p != nil && p.Spec.GetMtls().GetMode() != secapi.PeerAuthentication_MutualTLS_UNSET {
			mode = p.Spec.GetMtls().GetMode()
		}
	}
	var ports map[uint32]secapi.PeerAuthentication_MutualTLS_Mode
	if workload != nil {
		for port, m := range workload.Spec.GetPortLevelMtls() {
			if port == 0 || port > 65535 {
				continue
			}
			if ports == nil {
				ports = map[uint32]secapi.PeerAuthentication_MutualTLS_Mode{}
			}
			ports[port] = cmp.Or(m.GetMode(), mode)
		}
	}
	return mode, ports
}

// older orders policies as Istio picks among conflicting ones: the
// oldest, then by name.
func older(a, b metaObject) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

type metaObject interface {
	GetCreationTimestamp() metav1.Time
	GetName() string
}

// authorizationPoliciesFor returns the policies that select a workload
// of namespace ns (pod nil: only those without a selector), by
// namespace and name: mesh-wide ones of the root namespace, and the
// namespace's own without a selector, with a matching selector, or whose
// targetRefs name a Service of the namespace that selects the pod.
func (s *Server) authorizationPoliciesFor(ns string, pod *corev1.Pod) []*securityv1.AuthorizationPolicy {
	var out []*securityv1.AuthorizationPolicy
	for _, p := range indexed[*securityv1.AuthorizationPolicy](s.src.authzPolicies, s.rootNamespace(), ns) {
		if s.selects(p, ns, pod) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *securityv1.AuthorizationPolicy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func (s *Server) selects(p *securityv1.AuthorizationPolicy, ns string, pod *corev1.Pod) bool {
	sel := p.Spec.GetSelector().GetMatchLabels()
	refs := p.Spec.GetTargetRefs()
	if r := p.Spec.GetTargetRef(); r != nil { //nolint:staticcheck // deprecated for targetRefs, and still written
		refs = append(refs, r)
	}
	root := p.Namespace == s.rootNamespace()
	if p.Namespace != ns && !root {
		return false
	}
	switch {
	case len(refs) > 0:
		if pod == nil || p.Namespace != ns {
			return false
		}
		for _, r := range refs {
			if !serviceRef(r.GetGroup(), r.GetKind()) || cmp.Or(r.GetNamespace(), p.Namespace) != p.Namespace {
				continue
			}
			svc, err := s.src.services.Services(p.Namespace).Get(r.GetName())
			if err == nil && len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				return true
			}
		}
		return false
	case len(sel) > 0:
		return pod != nil && labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels))
	}
	return root || p.Namespace == ns
}

func serviceRef(group, kind string) bool {
	return (group == "" || group == "core") && kind == "Service"
}

// rootNamespace is Options.RootNamespace or DefaultRootNamespace.
func (s *Server) rootNamespace() string {
	return cmp.Or(s.opts.RootNamespace, DefaultRootNamespace)
}

// indexed lists the objects of the given namespaces from a store with
// the namespace index.
func indexed[T any](store cache.Indexer, namespaces ...string) []T {
	if store == nil {
		return nil
	}
	var out []T
	seen := map[string]bool{}
	for _, ns := range namespaces {
		if seen[ns] {
			continue
		}
		seen[ns] = true
		objs, _ := store.ByIndex(cache.NamespaceIndex, ns)
		for _, o := range objs {
			if t, ok := o.(T); ok {
				out = append(out, t)
			}
		}
	}
	return out
}
