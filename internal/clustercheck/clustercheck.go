// Package clustercheck is `meshletctl check`'s cluster-wide checks: the
// Kubernetes release, the nodes' kernels and zone labels, the right to
// install, the control plane's readiness, the webhook's reach through a
// dry-run Pod, and each node's own check in a short-lived probe pod.
package clustercheck

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/internal/preflight"
)

// Options says what `meshletctl check` checks.
type Options struct {
	// Namespace is the control plane's (the chart's meshlet-system).
	Namespace string
	// Name is the injector's Deployment and webhook configuration name
	// (the chart's meshlet-injector).
	Name string
	// Installed makes a control plane that is missing or not ready a
	// failure (after an install); otherwise it is reported, not failed,
	// and the caller's right to install is checked instead.
	Installed bool
	// ReleaseNamespace is where Helm keeps the release's record (a
	// Secret): the namespace `helm install` runs in.
	ReleaseNamespace string
}

// Run checks a cluster for meshlet, as `meshletctl check` does before
// or after `helm install`: the Kubernetes release (native sidecars), every
// node's Linux release and zone label, before an install the caller's
// permission to create what the chart installs, and whether the control
// plane is installed and ready. Each check's error is its result, not
// Run's.
func Run(ctx context.Context, client kubernetes.Interface, o Options) []preflight.Result {
	results := []preflight.Result{checkServerVersion(client)}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		results = append(results, preflight.Result{Check: "nodes", Status: preflight.Fail, Detail: "list nodes: " + err.Error()})
	} else {
		results = append(results, NodeChecks(nodes.Items)...)
	}
	if !o.Installed {
		results = append(results, checkInstallRights(ctx, client, o.Namespace, o.ReleaseNamespace))
	}
	return append(results, checkControlPlane(ctx, client, o))
}

func checkServerVersion(client kubernetes.Interface) preflight.Result {
	r := preflight.Result{Check: "Kubernetes >= " + preflight.NativeSidecarKubernetes + " (native sidecars)"}
	info, err := client.Discovery().ServerVersion()
	if err != nil {
		r.Status, r.Detail = preflight.Fail, "the API server's version: "+err.Error()
		return r
	}
	v, err := preflight.ParseVersion(info.Major + "." + info.Minor)
	switch {
	case err != nil:
		r.Status, r.Detail = preflight.Warn, fmt.Sprintf("Kubernetes %s: %v", info.GitVersion, err)
	case !v.AtLeast(preflight.MustVersion(preflight.NativeSidecarKubernetes)):
		r.Status, r.Detail = preflight.Warn, fmt.Sprintf("Kubernetes %s: pods get a classic sidecar (the first container, holding the app back with a postStart hook): init containers run unmeshed, and a Job's pod does not end with its app", info.GitVersion)
	default:
		r.Status, r.Detail = preflight.OK, "Kubernetes "+info.GitVersion
	}
	return r
}

// NodeChecks checks the nodes' Linux releases (as the kubelets report
// them) and zone labels, each over all nodes, naming the nodes that fall
// short.
func NodeChecks(nodes []corev1.Node) []preflight.Result {
	kernel := preflight.Result{Check: "nodes: Linux >= " + preflight.MinKernel}
	zone := preflight.Result{Check: "nodes: labelled " + preflight.ZoneLabel}
	if len(nodes) == 0 {
		kernel.Status, kernel.Detail = preflight.Fail, "the cluster has no nodes"
		zone.Status, zone.Detail = preflight.Skip, "no nodes"
		return []preflight.Result{kernel, zone}
	}
	byStatus := map[preflight.Status][]string{}
	var unzoned []string
	zones := map[string]bool{}
	linux := 0
	for _, n := range nodes {
		info := n.Status.NodeInfo
		if info.OperatingSystem != "" && info.OperatingSystem != "linux" {
			byStatus[preflight.Warn] = append(byStatus[preflight.Warn], fmt.Sprintf("%s (%s: pods there are not meshed)", n.Name, info.OperatingSystem))
			continue
		}
		linux++
		r := preflight.Kernel("node "+n.Name, info.KernelVersion)
		byStatus[r.Status] = append(byStatus[r.Status], fmt.Sprintf("%s (%s)", n.Name, r.Detail))
		if z := n.Labels[preflight.ZoneLabel]; z == "" {
			unzoned = append(unzoned, n.Name)
		} else {
			zones[z] = true
		}
	}
	switch {
	case linux == 0:
		kernel.Status, kernel.Detail = preflight.Fail, "no Linux node: "+strings.Join(byStatus[preflight.Warn], "; ")
		zone.Status, zone.Detail = preflight.Skip, "no Linux node"
		return []preflight.Result{kernel, zone}
	case len(byStatus[preflight.Fail]) > 0:
		kernel.Status = preflight.Fail
		kernel.Detail = strings.Join(byStatus[preflight.Fail], "; ")
	case len(byStatus[preflight.Warn]) > 0:
		kernel.Status = preflight.Warn
		kernel.Detail = strings.Join(byStatus[preflight.Warn], "; ")
	default:
		kernel.Status = preflight.OK
		kernel.Detail = fmt.Sprintf("all %d nodes: %s", len(nodes), strings.Join(byStatus[preflight.OK], ", "))
	}
	if len(unzoned) > 0 {
		zone.Status = preflight.Warn
		zone.Detail = fmt.Sprintf("%d of %d Linux nodes have no zone (zone-aware routing treats their pods as zoneless): %s", len(unzoned), linux, strings.Join(unzoned, ", "))
	} else {
		names := make([]string, 0, len(zones))
		for z := range zones {
			names = append(names, z)
		}
		sort.Strings(names)
		plural := "s"
		if len(names) == 1 {
			plural = ""
		}
		zone.Status, zone.Detail = preflight.OK, fmt.Sprintf("%d zone%s: %s", len(names), plural, strings.Join(names, ", "))
	}
	return []preflight.Result{kernel, zone}
}

// installRights are the kinds `helm install` of the chart creates with its
// default values (the monitoring objects are optional), each asked of the
// API server with SelfSubjectAccessReviews for create and for patch (Helm
// 4 applies them server-side); cluster-scoped ones without a namespace.
var installRights = []struct {
	group, resource string
	cluster         bool
}{
	{"", "namespaces", true}, {"rbac.authorization.k8s.io", "clusterroles", true}, {"rbac.authorization.k8s.io", "clusterrolebindings", true},
	{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", true},
	{"", "serviceaccounts", false}, {"", "services", false}, {"apps", "deployments", false}, {"policy", "poddisruptionbudgets", false},
	{"rbac.authorization.k8s.io", "roles", false}, {"rbac.authorization.k8s.io", "rolebindings", false},
}

// crdKinds are where the chart's CRDs (crds/: Gateway API's HTTPRoute,
// GRPCRoute and ReferenceGrant; Istio's PeerAuthentication and
// AuthorizationPolicy) serve their kinds.
var crdKinds = []struct {
	groupVersion string
	resources    []string
}{
	{"gateway.networking.k8s.io/v1", []string{"httproutes", "grpcroutes", "referencegrants"}},
	{"security.istio.io/v1", []string{"peerauthentications", "authorizationpolicies"}},
}

// routeRights are the rights the chart's ClusterRole grants on Gateway
// API routes and Istio's security policies. RBAC lets a caller create a
// role that grants a right, and bind it, only if the caller holds the
// right itself, or may escalate and bind cluster roles. They are asked
// because, unlike the core kinds' reads, they came with the CRDs, and a
// role made for installing often lacks them.
var routeRights = func() []struct{ verb, group, resource, subresource string } {
	var out []struct{ verb, group, resource, subresource string }
	for _, g := range []struct {
		group     string
		resources []string
	}{{"gateway.networking.k8s.io", []string{"httproutes", "grpcroutes"}}, {"security.istio.io", []string{"peerauthentications", "authorizationpolicies"}}} {
		for _, res := range g.resources {
			for _, v := range []string{"get", "list", "watch"} {
				out = append(out, struct{ verb, group, resource, subresource string }{v, g.group, res, ""})
			}
		}
		for _, res := range g.resources {
			for _, v := range []string{"update", "patch"} {
				out = append(out, struct{ verb, group, resource, subresource string }{v, g.group, res, "status"})
			}
		}
	}
	return out
}()

// access is one SelfSubjectAccessReview's question.
type access struct{ verb, group, resource, subresource, ns string }

func (a access) String() string {
	where := "cluster-wide"
	if a.ns != "" {
		where = "in " + a.ns
	}
	res := a.resource
	if a.subresource != "" {
		res += "/" + a.subresource
	}
	return fmt.Sprintf("%s %s %s", a.verb, res, where)
}

// notAllowed lists, as access strings, the asks the caller is denied.
func notAllowed(ctx context.Context, client kubernetes.Interface, asks []access) ([]string, error) {
	var denied []string
	for _, a := range asks {
		ok, err := allowed(ctx, client, a)
		if err != nil {
			return nil, err
		}
		if !ok {
			denied = append(denied, a.String())
		}
	}
	return denied, nil
}

// allowed asks the API server whether the caller may do a.
func allowed(ctx context.Context, client kubernetes.Interface, a access) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource,
			Subresource: a.subresource},
	}}
	res, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("ask whether the caller may %s: %w", a, err)
	}
	return res.Status.Allowed, nil
}

// crdsInstalled says whether the API server serves every kind of the
// chart's CRDs already: Helm creates a CRD of crds/ only when it is
// missing (and never patches or deletes it), so then no right on CRDs is
// needed. A discovery error counts as not installed.
func crdsInstalled(client kubernetes.Interface) bool {
	for _, k := range crdKinds {
		list, err := client.Discovery().ServerResourcesForGroupVersion(k.groupVersion)
		if err != nil {
			return false
		}
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		for _, r := range k.resources {
			if !served[r] {
				return false
			}
		}
	}
	return true
}

// checkInstallRights asks whether the caller may create and patch every
// kind the chart installs (in ns, or cluster-wide), create its CRDs (unless
// they are installed already), grant what its ClusterRole grants on Gateway
// API routes and Istio security policies, and create the release's record, a Secret in releaseNS. The
// escalation check for the ClusterRole's and Role's other rights is not
// asked.
func checkInstallRights(ctx context.Context, client kubernetes.Interface, ns, releaseNS string) preflight.Result {
	r := preflight.Result{Check: "may create what the chart installs"}
	var asks []access
	for _, k := range installRights {
		where := ns
		if k.cluster {
			where = ""
		}
		asks = append(asks, access{verb: "create", group: k.group, resource: k.resource, ns: where},
			access{verb: "patch", group: k.group, resource: k.resource, ns: where})
	}
	crds := "create the Gateway API and Istio security CRDs"
	if crdsInstalled(client) {
		crds = "the Gateway API and Istio security CRDs are installed already"
	} else {
		asks = append(asks, access{verb: "create", group: "apiextensions.k8s.io", resource: "customresourcedefinitions"})
	}
	if releaseNS == "" {
		releaseNS = "default"
	}
	asks = append(asks, access{verb: "create", resource: "secrets", ns: releaseNS})
	denied, err := notAllowed(ctx, client, asks)
	if err != nil {
		r.Status, r.Detail = preflight.Fail, err.Error()
		return r
	}
	var grantAsks []access
	for _, g := range routeRights {
		grantAsks = append(grantAsks, access{verb: g.verb, group: g.group, resource: g.resource, subresource: g.subresource})
	}
	lacking, err := notAllowed(ctx, client, grantAsks)
	if err != nil {
		r.Status, r.Detail = preflight.Fail, err.Error()
		return r
	}
	grants := fmt.Sprintf("hold the %d rights the ClusterRole grants on Gateway API routes and Istio security policies", len(routeRights))
	if len(lacking) > 0 {
		escalate := true
		for _, verb := range []string{"escalate", "bind"} {
			ok, err := allowed(ctx, client, access{verb: verb, group: "rbac.authorization.k8s.io", resource: "clusterroles"})
			if err != nil {
				r.Status, r.Detail = preflight.Fail, err.Error()
				return r
			}
			escalate = escalate && ok
		}
		if escalate {
			grants = "escalate and bind cluster roles (the ClusterRole grants rights on Gateway API routes and Istio security policies the caller lacks)"
		} else {
			denied = append(denied, fmt.Sprintf("%s (the ClusterRole grants them: RBAC wants the caller to hold them, or to be allowed to escalate and bind clusterroles)",
				strings.Join(lacking, ", ")))
		}
	}
	if len(denied) > 0 {
		r.Status, r.Detail = preflight.Fail, "not allowed to "+strings.Join(denied, ", ")
		return r
	}
	r.Status, r.Detail = preflight.OK, fmt.Sprintf("create and patch all %d kinds, %s, %s, and create the release's Secret in %s",
		len(installRights), crds, grants, releaseNS)
	return r
}

func checkControlPlane(ctx context.Context, client kubernetes.Interface, o Options) preflight.Result {
	r := preflight.Result{Check: "control plane " + o.Namespace + "/" + o.Name}
	missing := preflight.Skip // before an install: reported, not failed
	if o.Installed {
		missing = preflight.Fail
	}
	d, err := client.AppsV1().Deployments(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		r.Status, r.Detail = missing, "not installed: "+err.Error()
		return r
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.ReadyReplicas < want || want == 0 {
		// (A rollout in progress, or stuck on a new image, is not ready
		// though its old pods still are.)
		r.Status, r.Detail = missing, fmt.Sprintf("Deployment: %d of %d replicas updated, %d ready (generation %d observed %d)",
			d.Status.UpdatedReplicas, want, d.Status.ReadyReplicas, d.Generation, d.Status.ObservedGeneration)
		return r
	}
	wh, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		r.Status, r.Detail = missing, "webhook configuration: "+err.Error()
		return r
	}
	for _, w := range wh.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			r.Status, r.Detail = missing, fmt.Sprintf("webhook %s has no caBundle yet (the injector writes it once it serves)", w.Name)
			return r
		}
	}
	r.Status, r.Detail = preflight.OK, fmt.Sprintf("%d of %d injectors ready, %d webhooks with the CA bundle", d.Status.ReadyReplicas, want, len(wh.Webhooks))
	return r
}
