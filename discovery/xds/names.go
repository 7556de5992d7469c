package xds

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultClusterDomain is the cluster's DNS domain unless told otherwise.
const DefaultClusterDomain = "cluster.local"

// ServiceHost returns a Service's fully qualified name,
// <name>.<namespace>.svc.<domain> (domain "" means DefaultClusterDomain).
func ServiceHost(svc types.NamespacedName, domain string) string {
	if domain == "" {
		domain = DefaultClusterDomain
	}
	return fmt.Sprintf("%s.%s.svc.%s", svc.Name, svc.Namespace, domain)
}

// ClusterName returns the name of the cluster of a Service port, as Istio
// names outbound clusters: outbound|<port>||<host>. It is also the name of
// the cluster's load assignment.
func ClusterName(host string, port int32) string {
	return fmt.Sprintf("outbound|%d||%s", port, host)
}
