#!/usr/bin/env bash
# meshlet on a local kind cluster, from this checkout:
#   1. creates the kind cluster of deploy/kind/cluster.yaml (named meshlet:
#      one control plane, three workers in zones zone-a/b/c), unless it
#      exists;
#   2. builds the sidecar and injector images with `make images` (tag kind)
#      and loads them onto the nodes with `kind load image-archive`;
#   3. installs the control plane with `helm upgrade --install` of
#      deploy/helm/meshlet, set to those images;
#   4. labels the namespace meshlet-demo for injection and deploys a demo:
#      an echo Deployment spread over the three zones and a client in
#      zone-a calling it twice a second;
#   5. prints how to watch zone-aware routing and locality failover, and
#      how to run CI's cluster suite on the cluster (make e2e-cluster),
#      whose test app it loads too (bin/images/meshlet-e2e-app.tar).
# Needs docker (or another engine kind supports), kind, kubectl, helm (v4;
# the tests use v4.3.2), Go and make, and a network to pull the demo's
# busybox image. Safe to run again. `kind delete cluster --name meshlet` removes everything.
# Not run by CI (its machines have no container engine): see
# docs/install.md.
#   hack/kind-up.sh              all of the above
#   SKIP_IMAGES=1 hack/kind-up.sh  use images already loaded (tag $TAG)
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=meshlet
context="kind-$cluster"
TAG=${TAG:-kind}
demo=meshlet-demo

say() { printf '\n==> %s\n' "$*"; }
die() {
	printf 'kind-up: %s\n' "$*" >&2
	exit 1
}

for tool in kind kubectl helm; do
	command -v "$tool" >/dev/null 2>&1 && continue
	case $tool in
	kind) die "kind is not installed: go install sigs.k8s.io/kind@v0.33.0 (https://kind.sigs.k8s.io)" ;;
	helm) die "helm is not installed: go install helm.sh/helm/v4/cmd/helm@v4.3.2 (the version meshlet's tests use)" ;;
	*) die "$tool is not installed" ;;
	esac
done

say "kind cluster $cluster (deploy/kind/cluster.yaml)"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	echo "exists; using it"
else
	kind create cluster --config deploy/kind/cluster.yaml
fi
kubectl --context "$context" get nodes -L topology.kubernetes.io/zone

if [ "${SKIP_IMAGES:-}" = 1 ]; then
	say "images: skipped (SKIP_IMAGES=1), using ghcr.io/meshlet-dev/{injector,sidecar}:$TAG"
elif grep -q '^images:' Makefile; then
	say "images: make images TAG=$TAG, then kind load image-archive"
	make --no-print-directory images TAG="$TAG"
	# The cluster suite's test app (make e2e-cluster APP_IMAGE=...).
	go run -trimpath ./hack/images build -dir bin/images -tag "$TAG" -images meshlet-e2e-app >/dev/null
	for name in injector sidecar meshlet-e2e-app; do
		archive=bin/images/$name.tar
		[ -f "$archive" ] || die "make images made no $archive"
		kind load image-archive "$archive" --name "$cluster"
	done
else
	die "this checkout has no 'make images' target. Build OCI image archives of ./cmd/injector and ./cmd/sidecar
(static: CGO_ENABLED=0 go build -trimpath -tags grpcnotrace), named ghcr.io/meshlet-dev/injector:$TAG and
ghcr.io/meshlet-dev/sidecar:$TAG, load each with
  kind load image-archive FILE.tar --name $cluster
then run SKIP_IMAGES=1 $0"
fi

say "control plane: helm upgrade --install meshlet deploy/helm/meshlet"
helm upgrade --install meshlet deploy/helm/meshlet --kube-context "$context" \
	--set injector.image.tag="$TAG" --set proxy.image.tag="$TAG"
kubectl --context "$context" -n meshlet-system rollout status deployment/meshlet-injector --timeout=180s

say "demo: namespace $demo (labelled meshlet.io/injection=enabled), echo in three zones, a client in zone-a"
kubectl --context "$context" create namespace "$demo" --dry-run=client -o yaml | kubectl --context "$context" apply -f -
kubectl --context "$context" label namespace "$demo" meshlet.io/injection=enabled --overwrite
# The echo pods answer with their pod and node; the client prints each
# answer with the time. Deployments, so that pods refused while the
# injector's webhook was still starting are created again.
kubectl --context "$context" -n "$demo" apply -f - <<'EOF'
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 3
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: echo}}}
      containers:
        - name: app
          image: busybox:1.37
          command: [sh, -c, 'mkdir -p /www && echo "pod=$POD_NAME node=$NODE_NAME" > /www/index.html && exec httpd -f -p 8080 -h /www']
          env:
            - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
            - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: client}
spec:
  replicas: 1
  selector: {matchLabels: {app: client}}
  template:
    metadata: {labels: {app: client}}
    spec:
      nodeSelector: {topology.kubernetes.io/zone: zone-a}
      containers:
        - name: app
          image: busybox:1.37
          command: [sh, -c, 'while true; do echo "$(date +%T) $(wget -qO- -T 2 http://echo/ 2>&1 || echo failed)"; sleep 0.5; done']
EOF
kubectl --context "$context" -n "$demo" rollout status deployment/echo --timeout=300s
kubectl --context "$context" -n "$demo" rollout status deployment/client --timeout=300s
kubectl --context "$context" -n "$demo" get pods -o wide

zone_a=$(kubectl --context "$context" get nodes -l topology.kubernetes.io/zone=zone-a -o jsonpath='{.items[0].metadata.name}')
cat <<EOF

meshlet is running on kind. Every pod in $demo has the meshlet-proxy sidecar
(kubectl --context $context -n $demo get pods -o jsonpath='{..initContainers[*].name}').

Watch which echo pod (and node, and so zone) answers the client in zone-a:
  kubectl --context $context -n $demo logs -f deployment/client
Zones of the nodes:
  kubectl --context $context get nodes -L topology.kubernetes.io/zone

Zone-aware routing with locality failover (docs/design.md): keep the client
in its own zone while that zone has a healthy endpoint:
  kubectl --context $context -n $demo annotate service echo meshlet.io/failover-labels=topology.kubernetes.io/zone
    -> only the zone-a pod (on $zone_a) answers
Fail zone-a: cordon its node and delete its echo pod (the spread constraint
keeps the replacement Pending):
  kubectl --context $context cordon $zone_a
  kubectl --context $context -n $demo delete pod -l app=echo --field-selector spec.nodeName=$zone_a
    -> answers come from zones b and c, no request lost
Bring it back:
  kubectl --context $context uncordon $zone_a
    -> the replacement lands in zone-a and answers alone again

The client's sidecar's own view: its upstream hosts with their zones and
health (/clusters), its counters (/stats):
  kubectl --context $context -n $demo exec deploy/client -c app -- wget -qO- http://127.0.0.1:15000/clusters
CI's cluster suite (injection, mTLS, zone failover, Prometheus scrape, STRICT,
a Job) on this cluster, in namespaces of its own that it deletes after:
  kind get kubeconfig --name $cluster >/tmp/kind-$cluster.kubeconfig
  make e2e-cluster KUBECONFIG=/tmp/kind-$cluster.kubeconfig APP_IMAGE=ghcr.io/meshlet-dev/meshlet-e2e-app:$TAG
Remove it all: kind delete cluster --name $cluster
EOF
