package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet-dev/meshlet/discovery/syncz"
	"github.com/meshlet-dev/meshlet/webhook"
)

// DebugPort is the control plane's loopback debug port (istiod's 8080),
// where /debug/syncz is served; a port-forward reaches it.
const DebugPort = 8080

// proxyStatus is one row of proxy-status: a sidecar stream, the
// control-plane pod serving it ("" for a meshed pod no control plane
// serves).
type proxyStatus struct {
	syncz.ProxySync
	ControlPlane string `json:"control_plane,omitempty"`
}

func proxyStatusFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	var kf kubeFlags
	kf.register(fs)
	ns := fs.String("control-plane-namespace", "meshlet-system", "the control plane's `NAMESPACE`.")
	selector := fs.String("control-plane-selector", "app.kubernetes.io/name=meshlet-injector", "the label `SELECTOR` of the control-plane pods.")
	output := fs.String("o", "table", "output `FORMAT`: table or json.")
	return func(out io.Writer) error {
		if *output != "table" && *output != "json" {
			return fmt.Errorf("-o %q: want table or json", *output)
		}
		k, err := kf.connect()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cps, err := k.client.CoreV1().Pods(*ns).List(ctx, metav1.ListOptions{LabelSelector: *selector})
		if err != nil {
			return fmt.Errorf("control-plane pods in %s (%s): %w", *ns, *selector, err)
		}
		var rows []proxyStatus
		var errs, idle []string
		running, read := 0, 0
		for _, p := range cps.Items {
			if p.Status.Phase != corev1.PodRunning {
				// A rollout's pending or finished pod serves no sidecar.
				idle = append(idle, fmt.Sprintf("%s is %s", p.Name, p.Status.Phase))
				continue
			}
			running++
			syncs, err := readSyncz(ctx, k, p)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			read++
			for _, s := range syncs {
				rows = append(rows, proxyStatus{ProxySync: s, ControlPlane: p.Name + "." + p.Namespace})
			}
		}
		if running == 0 {
			errs = append(errs, fmt.Sprintf("no running control-plane pod in %s with %s %v", *ns, *selector, idle))
		}
		// Meshed pods without a stream: NOT CONNECTED, or UNKNOWN when a
		// control-plane pod could not be read (it may serve them).
		state := syncz.NotConnected
		if read < running {
			state = syncz.Unknown
		}
		if pods, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
			rows = append(rows, unconnected(pods.Items, rows, state)...)
		} else {
			errs = append(errs, "list the meshed pods: "+err.Error())
		}
		slices.SortFunc(rows, func(a, b proxyStatus) int {
			return cmp.Or(strings.Compare(a.Proxy, b.Proxy), strings.Compare(a.ControlPlane, b.ControlPlane))
		})
		var werr error
		if *output == "json" {
			werr = writeJSON(out, rows)
		} else {
			werr = proxyStatusTable(out, rows, time.Now())
		}
		if werr != nil {
			return werr
		}
		if len(errs) > 0 {
			return fmt.Errorf("proxy-status: %s", strings.Join(errs, "; "))
		}
		return nil
	}
}

// readSyncz reads a control-plane pod's /debug/syncz through a
// port-forward to its debug port.
func readSyncz(ctx context.Context, k *kube, p corev1.Pod) ([]syncz.ProxySync, error) {
	fetch, stop, err := k.forward(ctx, p.Namespace, p.Name, DebugPort)
	if err != nil {
		return nil, err
	}
	defer stop()
	b, err := fetch("GET", "/debug/syncz")
	if err != nil {
		return nil, fmt.Errorf("control plane %s: %v", p.Name, err)
	}
	var syncs []syncz.ProxySync
	if err := json.Unmarshal(b, &syncs); err != nil {
		return nil, fmt.Errorf("control plane %s: /debug/syncz: %v", p.Name, err)
	}
	return syncs, nil
}

// unconnected are the running pods with the meshlet sidecar whose node
// id (POD.NAMESPACE) has no stream in rows, in state.
func unconnected(pods []corev1.Pod, rows []proxyStatus, state string) []proxyStatus {
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Proxy] = true
	}
	var out []proxyStatus
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || !hasSidecar(p) || seen[p.Name+"."+p.Namespace] {
			continue
		}
		out = append(out, proxyStatus{ProxySync: syncz.ProxySync{Proxy: p.Name + "." + p.Namespace, State: state}})
	}
	return out
}

func hasSidecar(p corev1.Pod) bool {
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.Name == webhook.ProxyContainer {
			return true
		}
	}
	return false
}

// syncTypes are the columns of proxy-status, Istio's order.
var syncTypes = []string{"cds", "lds", "eds", "rds", "ecds"}

func proxyStatusTable(out io.Writer, rows []proxyStatus, now time.Time) error {
	var cells [][]string
	for _, r := range rows {
		row := []string{r.Proxy}
		if r.ControlPlane == "" {
			for range syncTypes {
				row = append(row, "-")
			}
			cells = append(cells, append(row, r.State, "-", "-"))
			continue
		}
		for _, t := range syncTypes {
			st := "-"
			for _, ts := range r.Types {
				if ts.Type == t {
					st = ts.Status
				}
			}
			row = append(row, st)
		}
		nack := "-"
		if n := r.LastNACK; n != nil {
			nack = fmt.Sprintf("%s %s ago: %s", n.Type, now.Sub(n.At).Round(time.Second), n.Message)
			if n.Superseded {
				nack += " (of an older version)"
			}
		}
		cells = append(cells, append(row, r.ControlPlane, r.ControlPlaneVersion, nack))
	}
	header := []string{"NAME"}
	for _, t := range syncTypes {
		header = append(header, strings.ToUpper(t))
	}
	return table(out, append(header, "CONTROL PLANE", "VERSION", "LAST NACK"), cells)
}
