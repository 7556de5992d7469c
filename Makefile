# meshlet — `make test` is what CI runs (through .ci/run).
GO ?= go

.PHONY: test fmt vet unit vectors e2e demo bench sidecar

test: fmt vet unit vectors e2e

# gofmt must have nothing to say (generated BPF bindings excepted).
fmt:
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -name '*_bpfe[lb].go' | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/

# All tests; fuzz targets run on their seed corpus only.
unit:
	$(GO) test -count=1 ./...

# The Envoy conformance vectors, with their summary line
# (MESHLET_LB_VECTORS=path runs another file of the same schema).
vectors:
	@$(GO) test -count=1 -run '^TestEnvoyVectors$$' -v ./lb/ | grep -E 'passed, [0-9]+ failed|^(ok|FAIL)'

# End-to-end tests against a real etcd + kube-apiserver + controller
# manager, SPIRE, and real nodes (kubelet, kube-scheduler; containerd, runc
# and CNI plugins from apt), built from the module proxy by
# e2e/k8s-tools.sh, e2e/spire-tools.sh and e2e/node-tools.sh (cached outside
# the clone; up to ~10 min each the first time, built before the tests so
# their time does not count against the test timeout).
e2e:
	bash e2e/k8s-tools.sh >/dev/null
	bash e2e/spire-tools.sh >/dev/null
	bash e2e/node-tools.sh >/dev/null
	$(GO) test -tags e2e -count=1 -timeout 30m ./e2e/

# The sidecar binary as it ships (images, benchmarks): static, and without
# gRPC's x/net/trace debug pages (-tags grpcnotrace), which would link
# html/template and map 2 MiB more of the binary into every sidecar.
SIDECAR_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -tags grpcnotrace
sidecar:
	$(SIDECAR_BUILD) -o bin/sidecar ./cmd/sidecar

# meshlet's main job, live, on its embedded default config.
demo:
	$(GO) run ./cmd/sidecar demo

bench:
	bench/lb.sh
