# Sourced by e2e/tools.sh: the Go module that
# builds Kubernetes binaries from the module proxy. k8s.io/kubernetes
# replaces every staging module with a local path; a tools module requiring
# it replaces them with their released versions.
K8S=v1.37.2 STAGING=v0.37.2

# k8s_module NAME REQUIRE...: writes go.mod for module NAME requiring
# k8s.io/kubernetes $K8S and each "path version" REQUIRE, with the staging
# replaces.
k8s_module() {
  local name=$1 m
  shift
  local staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap
code-generator component-base component-helpers controller-manager cri-api cri-client cri-streaming csi-translation-lib
dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler
kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver streaming"
  {
    echo "module $name"
    echo
    echo "go 1.26"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes $K8S"
    for m in "$@"; do echo "	$m"; done
    echo ")"
    echo
    echo "replace ("
    for m in $staging; do echo "	k8s.io/$m => k8s.io/$m $STAGING"; done
    echo ")"
  } > go.mod
}

# k8s_ldflags: the version stamps the Kubernetes build sets.
k8s_ldflags() {
  local v="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  echo "$v -X k8s.io/client-go/pkg/version.gitVersion=$K8S -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
}
