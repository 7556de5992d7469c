//go:build tools

// Package tools is the module that builds the e2e suite's tools (see
// ../tools.sh): the commands it runs are pinned here, with every module
// they need in go.mod and go.sum, so a build resolves nothing.
package tools

import (
	_ "github.com/spiffe/spire/cmd/spire-agent"
	_ "github.com/spiffe/spire/cmd/spire-server"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
