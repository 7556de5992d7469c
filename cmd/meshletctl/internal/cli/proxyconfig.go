package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/webhook"
)

// AdminPort is the sidecar's admin port (Envoy's and Istio's 15000),
// bound to the pod's loopback: the port-forward reaches it there.
const AdminPort = config.PortAdmin

type proxyConfigOptions struct {
	kube      kubeFlags
	namespace string
	output    string
	cluster   string // endpoints: one cluster
	level     string // log: the level to set
}

func proxyConfigFlags(fs *flag.FlagSet, what string, extra func(*flag.FlagSet, *proxyConfigOptions)) func(io.Writer) error {
	o := &proxyConfigOptions{}
	o.kube.register(fs)
	fs.StringVar(&o.namespace, "n", "", "the pod's `NAMESPACE` (also POD.NAMESPACE). Empty: the kubeconfig context's.")
	if what != "log" {
		fs.StringVar(&o.output, "o", "table", "output `FORMAT`: table, or json (the admin endpoint's own JSON, of the part shown).")
	}
	if extra != nil {
		extra(fs, o)
	}
	return func(out io.Writer) error {
		arg, err := positional(fs, "POD[.NAMESPACE]")
		if err != nil {
			return err
		}
		if o.output != "" && o.output != "table" && o.output != "json" {
			return cmdline.Usagef("-o %q: want table or json", o.output)
		}
		k, err := o.kube.connect()
		if err != nil {
			return err
		}
		name, ns := podArg(arg, o.namespace, k.namespace)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pod, err := k.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		if !hasSidecar(*pod) {
			return fmt.Errorf("pod %s/%s has no %s container: it is not in the mesh", ns, name, webhook.ProxyContainer)
		}
		fetch, stop, err := k.forward(ctx, ns, name, AdminPort)
		if err != nil {
			return err
		}
		defer stop()
		return proxyConfig(out, what, o, fetch)
	}
}

// proxyConfig writes one proxy-config view from a sidecar's admin
// endpoints, read through fetch.
func proxyConfig(out io.Writer, what string, o *proxyConfigOptions, fetch func(method, path string) ([]byte, error)) error {
	switch what {
	case "clusters", "routes", "listeners":
		b, err := fetch("GET", "/config_dump")
		if err != nil {
			return err
		}
		if o.output == "json" {
			return rawPart(out, b, what)
		}
		var cfg config.Config
		if err := json.Unmarshal(b, &cfg); err != nil {
			return fmt.Errorf("/config_dump: %w", err)
		}
		switch what {
		case "clusters":
			return clustersTable(out, &cfg)
		case "routes":
			return routesTable(out, &cfg)
		}
		return listenersTable(out, &cfg)
	case "endpoints":
		b, err := fetch("GET", "/clusters?format=json")
		if err != nil {
			return err
		}
		var st struct {
			Clusters []clusterStatus `json:"cluster_statuses"`
		}
		var raw struct {
			Clusters []json.RawMessage `json:"cluster_statuses"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("/clusters: %w", err)
		}
		if err := json.Unmarshal(b, &raw); err != nil || len(raw.Clusters) != len(st.Clusters) {
			return fmt.Errorf("/clusters: %v", err)
		}
		if o.cluster != "" {
			keep := slices.IndexFunc(st.Clusters, func(c clusterStatus) bool { return c.Name == o.cluster })
			if keep < 0 {
				return fmt.Errorf("no cluster %q", o.cluster)
			}
			st.Clusters, raw.Clusters = st.Clusters[keep:keep+1], raw.Clusters[keep:keep+1]
		}
		if o.output == "json" {
			// The sidecar's own JSON, every counter of it.
			return writeJSON(out, raw)
		}
		return endpointsTable(out, st.Clusters)
	case "secrets":
		b, err := fetch("GET", "/certs")
		if err != nil {
			return err
		}
		if o.output == "json" {
			_, err := out.Write(b)
			return err
		}
		var certs adminv3.Certificates
		if err := protojson.Unmarshal(b, &certs); err != nil {
			return fmt.Errorf("/certs: %w", err)
		}
		return secretsTable(out, &certs)
	case "log":
		method, path := "GET", "/logging"
		if o.level != "" {
			method, path = "POST", "/logging?level="+url.QueryEscape(o.level)
		}
		b, err := fetch(method, path)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	return fmt.Errorf("proxy-config: no view %q", what)
}

// rawPart writes the part of a /config_dump (the sidecar's config, as
// it serves it) that a view shows: its clusters, its listeners, or each
// listener's routes with the listener's name.
func rawPart(out io.Writer, dump []byte, what string) error {
	var cfg struct {
		Clusters  json.RawMessage
		Listeners []map[string]json.RawMessage
	}
	if err := json.Unmarshal(dump, &cfg); err != nil {
		return fmt.Errorf("/config_dump: %w", err)
	}
	switch what {
	case "clusters":
		return writeJSON(out, cfg.Clusters)
	case "listeners":
		return writeJSON(out, cfg.Listeners)
	}
	type listenerRoutes struct {
		Listener json.RawMessage `json:"listener"`
		Routes   json.RawMessage `json:"routes"`
	}
	var rs []listenerRoutes
	for _, l := range cfg.Listeners {
		rs = append(rs, listenerRoutes{l["Name"], l["Routes"]})
	}
	return writeJSON(out, rs)
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// clusterStatus and hostStatus are what the endpoints table shows of the
// sidecar's /clusters?format=json (-o json writes all of it).
type clusterStatus struct {
	Name         string       `json:"name"`
	ZoneRouting  string       `json:"zone_routing_state"`
	HealthyLoad  []uint32     `json:"healthy_priority_load"`
	DegradedLoad []uint32     `json:"degraded_priority_load"`
	Hosts        []hostStatus `json:"hosts"`
}

type hostStatus struct {
	Address     string      `json:"address"`
	HealthFlags string      `json:"health_flags"`
	Weight      uint32      `json:"weight"`
	Locality    lb.Locality `json:"locality"`
	Priority    uint32      `json:"priority"`
}

func endpointsTable(out io.Writer, clusters []clusterStatus) error {
	var rows [][]string
	for _, c := range clusters {
		load := make([]string, len(c.HealthyLoad))
		for i, l := range c.HealthyLoad {
			load[i] = fmt.Sprintf("P%d=%d%%", i, l)
		}
		for _, h := range c.Hosts {
			status := "HEALTHY"
			switch {
			case strings.Contains(h.HealthFlags, "failed") || strings.Contains(h.HealthFlags, "excluded"):
				status = "UNHEALTHY " + h.HealthFlags
			case strings.Contains(h.HealthFlags, "degraded"):
				status = "DEGRADED " + h.HealthFlags
			case h.HealthFlags != "healthy" && h.HealthFlags != "":
				status = h.HealthFlags
			}
			rows = append(rows, []string{h.Address, status, c.Name, dash(h.Locality.Region), dash(h.Locality.Zone),
				strconv.FormatUint(uint64(h.Priority), 10), strconv.FormatUint(uint64(h.Weight), 10),
				dash(c.ZoneRouting), dash(strings.Join(load, " "))})
		}
	}
	return table(out, []string{"ENDPOINT", "STATUS", "CLUSTER", "REGION", "ZONE", "PRIORITY", "WEIGHT", "ZONE ROUTING", "PRIORITY LOAD"}, rows)
}

func clustersTable(out io.Writer, cfg *config.Config) error {
	var rows [][]string
	for _, c := range cfg.Clusters {
		prios := map[uint32]bool{}
		for _, e := range c.Endpoints {
			prios[e.Priority] = true
		}
		proto := string(c.Protocol)
		cb := fmt.Sprintf("%d/%d/%d/%d", c.CircuitBreakers.MaxConnections, c.CircuitBreakers.MaxPendingRequests,
			c.CircuitBreakers.MaxRequests, c.CircuitBreakers.MaxRetries)
		outlier := "-"
		if c.Outlier != nil {
			outlier = "on"
		}
		rows = append(rows, []string{c.Name, dash(proto), c.LB.Policy.String(), strconv.Itoa(len(c.Endpoints)),
			strconv.Itoa(len(prios)), outlier, cb})
	}
	return table(out, []string{"CLUSTER", "PROTOCOL", "LB", "ENDPOINTS", "PRIORITIES", "OUTLIER", "MAX CONN/PENDING/REQ/RETRIES"}, rows)
}

func routesTable(out io.Writer, cfg *config.Config) error {
	var rows [][]string
	for _, l := range cfg.Listeners {
		for _, r := range l.Routes {
			hosts := strings.Join(r.Hosts, ",")
			if r.Destination != "" {
				hosts = dash(hosts) + " (to " + r.Destination + ")"
			}
			cluster := r.Cluster
			if cluster == "" && len(r.Rules) > 0 {
				cluster = fmt.Sprintf("%d rules", len(r.Rules))
			}
			rows = append(rows, []string{l.Name, dash(r.Name), dash(hosts), dash(r.RouteConfig), dash(cluster)})
		}
	}
	return table(out, []string{"LISTENER", "ROUTE", "HOSTS", "ROUTE CONFIG", "CLUSTER"}, rows)
}

func listenersTable(out io.Writer, cfg *config.Config) error {
	var rows [][]string
	for _, l := range cfg.Listeners {
		mtls := "-"
		if l.MTLS != nil {
			mtls = string(l.MTLS.PeerAuthorization.Mode)
		}
		rows = append(rows, []string{l.Name, l.Address, string(l.Direction), dash(string(l.Protocol)), mtls, strconv.Itoa(len(l.Routes))})
	}
	return table(out, []string{"LISTENER", "ADDRESS", "DIRECTION", "PROTOCOL", "MTLS", "ROUTES"}, rows)
}

func secretsTable(out io.Writer, certs *adminv3.Certificates) error {
	var rows [][]string
	add := func(kind string, d *adminv3.CertificateDetails) {
		var sans []string
		for _, s := range d.GetSubjectAltNames() {
			switch {
			case s.GetUri() != "":
				sans = append(sans, s.GetUri())
			case s.GetDns() != "":
				sans = append(sans, s.GetDns())
			case s.GetIpAddress() != "":
				sans = append(sans, s.GetIpAddress())
			}
		}
		rows = append(rows, []string{d.GetPath(), kind, d.GetSerialNumber(), dash(strings.Join(sans, ",")),
			d.GetValidFrom().AsTime().UTC().Format(time.RFC3339), d.GetExpirationTime().AsTime().UTC().Format(time.RFC3339)})
	}
	for _, c := range certs.GetCertificates() {
		for i, d := range c.GetCertChain() {
			kind := "Cert Chain"
			if i > 0 {
				kind = "Cert Chain (intermediate)"
			}
			add(kind, d)
		}
		for _, d := range c.GetCaCert() {
			add("CA", d)
		}
	}
	return table(out, []string{"RESOURCE NAME", "TYPE", "SERIAL NUMBER", "SUBJECT ALT NAMES", "NOT BEFORE", "NOT AFTER"}, rows)
}
