// Package syncz is the JSON of the control plane's /debug/syncz: each
// sidecar stream's xDS state, which the control plane (discovery/xds)
// serves and meshletctl proxy-status reads. Pure types, so that the CLI
// links none of the control plane.
package syncz

import "time"

// The sync states of one resource type on one stream, as istioctl
// proxy-status names them (NACKED where Istio prints its error).
const (
	Synced  = "SYNCED"   // the last response sent was acknowledged
	Stale   = "STALE"    // a response is sent and not yet acknowledged
	NotSent = "NOT SENT" // the sidecar asked for the type, nothing was sent
	NACKed  = "NACKED"   // the sidecar rejected the last response
)

// TypeSync is one resource type's state on a stream.
type TypeSync struct {
	// Type is Istio's short name: cds, eds, rds, ecds, lds, sds.
	Type string `json:"type"`
	// Status is one of Synced, Stale, NotSent, NACKed.
	Status string `json:"status"`
	// Sent is the version last sent, Acked the version the sidecar last
	// acknowledged (empty: none).
	Sent  string `json:"sent,omitempty"`
	Acked string `json:"acked,omitempty"`
	// Nonce is the last response's.
	Nonce string `json:"nonce,omitempty"`
}

// NACK is a response a sidecar rejected.
type NACK struct {
	Type string `json:"type"`
	// Version is the rejected version (empty when Superseded).
	Version string `json:"version,omitempty"`
	// Message is the sidecar's error detail.
	Message string    `json:"message"`
	At      time.Time `json:"at"`
	// Superseded is set when the rejection was of an older response than
	// the last one sent, which it leaves in its state.
	Superseded bool `json:"superseded,omitempty"`
}

// The states of a sidecar in proxy-status.
const (
	Connected    = "CONNECTED"     // a stream to a control-plane pod
	NotConnected = "NOT CONNECTED" // a running pod with the sidecar, no stream
	Unknown      = "UNKNOWN"       // a control-plane pod could not be read
)

// ProxySync is one sidecar stream's xDS state, an entry of /debug/syncz.
type ProxySync struct {
	// Proxy is the sidecar's node id (POD.NAMESPACE for injected pods).
	Proxy string `json:"proxy"`
	// Namespace and ServiceAccount are the stream's authenticated
	// identity (empty without an authenticator).
	Namespace      string `json:"namespace,omitempty"`
	ServiceAccount string `json:"service_account,omitempty"`
	// Delta is true for the incremental protocol.
	Delta bool `json:"delta"`
	// Connected is when the stream opened.
	Connected time.Time `json:"connected,omitzero"`
	// Types are the resource types asked for, sorted by Type.
	Types []TypeSync `json:"types"`
	// LastNACK is the latest rejection on the stream.
	LastNACK *NACK `json:"last_nack,omitempty"`
	// ControlPlaneVersion is the control plane's build: its module
	// version, else its VCS revision, else "meshlet".
	ControlPlaneVersion string `json:"control_plane_version,omitempty"`
	// State is Connected, NotConnected or Unknown.
	State string `json:"state"`
}
