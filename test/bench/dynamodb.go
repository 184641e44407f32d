package main

import (
	"fmt"
	"net"
	"path/filepath"

	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/internal/procinfo"
)

// dynamoLocal is a DynamoDB Local started for the benchmark.
type dynamoLocal struct {
	endpoint string
}

// startDynamoDBLocal starts DynamoDB Local (in memory) on core 0 with the
// other stores, through launch (which records its pid as "dynamodb"); an error when its jar or java is missing.
func startDynamoDBLocal(launch func(core, name, addr string, argv ...string) (string, error)) (*dynamoLocal, error) {
	jar, err := dynamotest.Jar()
	if err != nil {
		return nil, err
	}
	java, err := dynamotest.Java()
	if err != nil {
		return nil, err
	}
	addr := procinfo.FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	lib := filepath.Join(filepath.Dir(jar), "DynamoDBLocal_lib")
	endpoint, err := launch(coreEnv, "dynamodb", addr, java, "-Djava.library.path="+lib, "-jar", jar, "-inMemory", "-disableTelemetry", "-port", port)
	if err != nil {
		return nil, fmt.Errorf("starting DynamoDB Local: %w", err)
	}
	return &dynamoLocal{endpoint: endpoint}, nil
}

// environ points a child's AWS configuration at the server (dynamotest's).
func (d *dynamoLocal) environ(dir string) []string {
	return (&dynamotest.Server{Endpoint: d.endpoint}).Environ(dir)
}
