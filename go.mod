module github.com/meshlet-dev/meshlet

go 1.26

require (
	github.com/cespare/xxhash/v2 v2.3.0
	sigs.k8s.io/yaml v1.6.0
)

require go.yaml.in/yaml/v2 v2.4.2 // indirect
