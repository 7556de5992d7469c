# meshlet — `make test` is what CI runs (through .ci/run).
GO ?= go

.PHONY: test fmt vet unit vectors demo bench

test: fmt vet unit vectors

# gofmt must have nothing to say (generated BPF bindings excepted).
fmt:
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -name '*_bpfe[lb].go' | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# All tests; fuzz targets run on their seed corpus only.
unit:
	$(GO) test -count=1 ./...

# The Envoy conformance vectors, with their summary line
# (MESHLET_LB_VECTORS=path runs another file of the same schema).
vectors:
	@$(GO) test -count=1 -run '^TestEnvoyVectors$$' -v ./lb/ | grep -E 'passed, [0-9]+ failed|^(ok|FAIL)'

# meshlet's main job on its embedded default scenario.
demo:
	$(GO) run ./cmd/sidecar lb simulate

bench:
	bench/lb.sh
