module github.com/idemproxy/idemproxy

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/vmihailenco/msgpack/v5 v5.4.1
	golang.org/x/net v0.60.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
