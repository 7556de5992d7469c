# meshlet — `make test` is what CI runs (through .ci/run).
GO ?= go

# vet and every test build as the sidecar ships (static, -trimpath, without
# gRPC's x/net/trace: see SIDECAR_BUILD below), which is also how the e2e
# suite and make images build the images (internal/images GoBuild). One
# configuration means one compile of the dependency tree on a cold cache,
# not one for the tests and another for the binaries.
export CGO_ENABLED := 0
TESTFLAGS = -trimpath -tags grpcnotrace

.PHONY: test fmt vet unit unit-http1-fallback vectors e2e e2e-tools e2e-cluster conformance demo bench sidecar meshletctl images push

# The whole suite as CI runs it (hack/test.sh): needs root, installs what
# a fresh machine lacks, says what each step does, and checks that the
# tests left nothing behind, also when they fail.
test:
	@bash hack/test.sh

# gofmt must have nothing to say (generated BPF bindings excepted).
fmt:
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -name '*_bpfe[lb].go' | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(TESTFLAGS) ./...
	$(GO) vet $(TESTFLAGS),e2e ./e2e/

# All tests; fuzz targets run on their seed corpus only. On a cold machine
# a few packages build tools first (hack/images cross-compiles both
# binaries for two architectures, deploy builds helm): past go test's
# 10-minute default while the rest of the suite shares the two cores.
unit:
	$(GO) test $(TESTFLAGS) -count=1 -timeout 30m ./...

# The data plane's tests on the net/http HTTP/1 fallback
# (Options.HTTP1Server); those of what only the fast server does skip.
unit-http1-fallback:
	MESHLET_TEST_HTTP1_SERVER=net/http $(GO) test $(TESTFLAGS) -count=1 ./dataplane/

# The Envoy conformance vectors, with their summary line
# (MESHLET_LB_VECTORS=path runs another file of the same schema).
vectors:
	@$(GO) test $(TESTFLAGS) -count=1 -run '^TestEnvoyVectors$$' -v ./lb/... | grep -E 'passed, [0-9]+ failed|^(ok|FAIL)'

# End-to-end tests against a real etcd + kube-apiserver + controller
# manager, SPIRE, and real nodes (kubelet, kube-scheduler; containerd, runc
# and CNI plugins from apt), built from the Go module proxy by
# e2e/tools.sh (one module, one build; cached outside the clone; 10-25 min
# the first time, with progress; built before the tests so that its time
# does not count against the test timeout).
e2e-tools:
	@bash e2e/tools.sh >/dev/null

e2e: e2e-tools
	$(GO) test $(TESTFLAGS),e2e -count=1 -timeout 30m ./e2e/

# The cluster suite (e2e/clustersuite: injection, mTLS through the
# redirect, Prometheus scrape, zone failover, STRICT refusal, a Job) against
# a cluster of yours where meshlet is installed, in namespaces of its own
# (labelled meshlet.io/e2e=cluster-suite) that it deletes after
# (TestCluster; TestRealNodesMesh runs the same suite on the nodes it
# builds). KUBECONFIG must be given here: an exported one is not taken. The nodes must pull the test app: APP_IMAGE=ref,
# or REGISTRY=host/path to build it and push it there. PROMETHEUS=url: a
# Prometheus that discovers pods by their prometheus.io annotations.
# TRUST_DOMAIN if the mesh's is not cluster.local. docs/testing.md.
e2e-cluster:
	@test "$(origin KUBECONFIG)" = "command line" || { echo "make e2e-cluster: name the cluster on the command line (an exported KUBECONFIG is not taken): make e2e-cluster KUBECONFIG=FILE (APP_IMAGE=ref or REGISTRY=host/path)" >&2; exit 2; }
	MESHLET_E2E_KUBECONFIG=$(abspath $(firstword $(subst :, ,$(KUBECONFIG)))) MESHLET_E2E_APP_IMAGE=$(APP_IMAGE) MESHLET_E2E_REGISTRY=$(REGISTRY) \
		MESHLET_E2E_PROMETHEUS=$(PROMETHEUS) MESHLET_E2E_TRUST_DOMAIN=$(TRUST_DOMAIN) \
		$(GO) test $(TESTFLAGS),e2e -count=1 -timeout 60m -run '^TestCluster$$' -v ./e2e/

# Gateway API's conformance suite (MESH-HTTP) on real nodes alone
# (TestGatewayAPIConformance; make e2e runs it with the rest), its report
# written to CONFORMANCE_REPORT. ARGS go to the suite, e.g.
# ARGS=-run-test=MeshBasic.
CONFORMANCE_REPORT ?= docs/conformance/gateway-api-v1.6.3-mesh.yaml
conformance: e2e-tools
	MESHLET_CONFORMANCE_REPORT=$(abspath $(CONFORMANCE_REPORT)) $(GO) test $(TESTFLAGS),e2e -count=1 -timeout 30m \
		-run '^TestGatewayAPIConformance$$' -v ./e2e/ $(if $(ARGS),-args $(ARGS))

# The sidecar binary as it ships (images, benchmarks): static, and without
# gRPC's x/net/trace debug pages (-tags grpcnotrace), which would link
# html/template and map 2 MiB more of the binary into every sidecar.
SIDECAR_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -tags grpcnotrace
sidecar:
	$(SIDECAR_BUILD) -o bin/sidecar ./cmd/sidecar

# The operator's CLI (docs/reference/cli.md), for the machine it runs on.
meshletctl:
	$(SIDECAR_BUILD) -o bin/meshletctl ./cmd/meshletctl

# The sidecar and injector images without a container engine
# (hack/images; docs/reference/images.md): OCI layouts bin/images/NAME and
# tarballs bin/images/NAME.tar, each an index of linux/amd64 and
# linux/arm64 images built like `make sidecar`. Reproducible: every
# timestamp is SOURCE_DATE_EPOCH (here the last commit's time), so the same
# commit gives the same digests. `make push REGISTRY=host/path TAG=t`
# pushes what `make images` built to host/path/sidecar:t and
# host/path/injector:t and prints the digests.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
TAG ?= $(VERSION)
IMAGES := $(GO) run -trimpath ./hack/images
images:
	$(IMAGES) build -dir bin/images -repository $(or $(REGISTRY),ghcr.io/meshlet-dev) -tag $(TAG) \
		-version $(VERSION) -revision $(REVISION) -epoch $(SOURCE_DATE_EPOCH)
push:
	@test -n "$(REGISTRY)" || { echo "make push: name the registry: make push REGISTRY=host/path TAG=tag" >&2; exit 2; }
	@$(MAKE) --no-print-directory images
	$(IMAGES) push -dir bin/images -registry $(REGISTRY) -tag $(TAG)

# meshlet's main job, live, on its embedded default config (what
# `go run ./cmd/sidecar demo` does, saying so while the first build runs).
demo:
	@echo "building the sidecar (the first build compiles its dependencies: 1-2 min on 2 cores)..."
	@$(GO) build $(TESTFLAGS) -pgo=off -o $${TMPDIR:-/tmp}/meshlet-demo-sidecar ./cmd/sidecar
	@exec $${TMPDIR:-/tmp}/meshlet-demo-sidecar demo $(ARGS)

bench:
	bench/lb.sh
