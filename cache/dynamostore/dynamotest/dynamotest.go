// Package dynamotest runs DynamoDB Local (AWS's jar, in memory) on a free
// loopback port for tests: one server shared by a test package, started at its
// first use and killed when the package's tests end, or one of a test's own.
//
// A package that uses it runs its tests through Main:
//
//	func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }
//
// The jar is found through IDEMPROXY_DYNAMODB_LOCAL_JAR (the path of
// DynamoDBLocal.jar, with its DynamoDBLocal_lib folder beside it), else in
// DefaultDir, where .ci/run installs it; java must be on PATH (or under
// JAVA_HOME). When IDEMPROXY_DYNAMODB_ENDPOINT is set, Start uses that server
// instead. When DynamoDB Local cannot start, tests are skipped with a message,
// except under CI=true, where they fail: CI must exercise the DynamoDB store.
package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DefaultDir is where .ci/run installs DynamoDB Local.
const DefaultDir = "/opt/dynamodb-local"

// Region is the region the test clients name (DynamoDB Local accepts any).
const Region = "us-east-1"

// startWait bounds DynamoDB Local's start (about 5 s on an idle machine).
const startWait = 60 * time.Second

// Server is a running DynamoDB Local.
type Server struct {
	// Endpoint is its URL, http://127.0.0.1:port.
	Endpoint string
	// External is true when it came from IDEMPROXY_DYNAMODB_ENDPOINT.
	External bool

	addr   string
	jar    string
	cmd    *exec.Cmd
	exited chan struct{}
	logf   string
}

var (
	mainRan atomic.Bool
	shared  struct {
		sync.Mutex
		srv *Server
		err error
	}
)

// Main runs the package's tests and then stops the shared server. Call it from
// TestMain.
func Main(m *testing.M) int {
	mainRan.Store(true)
	code := m.Run()
	shared.Lock()
	if shared.srv != nil {
		shared.srv.kill()
	}
	shared.Unlock()
	return code
}

// Jar finds DynamoDBLocal.jar: IDEMPROXY_DYNAMODB_LOCAL_JAR, else DefaultDir.
func Jar() (string, error) {
	if p := os.Getenv("IDEMPROXY_DYNAMODB_LOCAL_JAR"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("IDEMPROXY_DYNAMODB_LOCAL_JAR: %w", err)
		}
		return p, nil
	}
	p := filepath.Join(DefaultDir, "DynamoDBLocal.jar")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("DynamoDB Local not found at %s (set IDEMPROXY_DYNAMODB_LOCAL_JAR, or run .ci/run to install it)", p)
	}
	return p, nil
}

// Java finds the java program: JAVA_HOME/bin/java, else java on PATH.
func Java() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p := filepath.Join(h, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("java not found on PATH (install a Java 17 runtime: openjdk-17-jre-headless)")
	}
	return p, nil
}

// unavailable skips the test, or fails it under CI=true.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("dynamotest: %v; CI must run the DynamoDB tests", err)
	}
	t.Skipf("dynamotest: %v", err)
}

// Start returns the package's shared server, starting it at the first call (or
// the server at IDEMPROXY_DYNAMODB_ENDPOINT). Tests sharing it keep apart by
// using tables of their own.
func Start(t testing.TB) *Server {
	t.Helper()
	if ep := os.Getenv("IDEMPROXY_DYNAMODB_ENDPOINT"); ep != "" {
		s := &Server{Endpoint: strings.TrimRight(ep, "/"), External: true}
		if err := s.waitReady(5*time.Second, nil); err != nil {
			unavailable(t, fmt.Errorf("IDEMPROXY_DYNAMODB_ENDPOINT: %w", err))
		}
		return s
	}
	if !mainRan.Load() {
		t.Fatal("dynamotest: the shared server needs TestMain: func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }")
	}
	shared.Lock()
	defer shared.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = launch()
	}
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return shared.srv
}

// StartOwn starts a server for this test alone, killed when it ends; the test
// may Stop and Restart it.
func StartOwn(t testing.TB) *Server {
	t.Helper()
	s, err := launch()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.kill)
	return s
}

func launch() (*Server, error) {
	jar, err := Jar()
	if err != nil {
		return nil, err
	}
	if _, err := Java(); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s := &Server{jar: jar, addr: freeAddr()}
		s.Endpoint = "http://" + s.addr
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("dynamotest: no free loopback port: %v", err))
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs java -jar DynamoDBLocal.jar -inMemory -disableTelemetry (nothing
// is sent anywhere) on the server's port, from
// the jar's folder (it loads its native libraries from DynamoDBLocal_lib there).
func (s *Server) start() error {
	java, err := Java()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(s.addr)
	logf, err := os.CreateTemp("", "dynamodb-local-*.log")
	if err != nil {
		return err
	}
	s.logf = logf.Name()
	cmd := exec.Command(java, "-Djava.library.path=DynamoDBLocal_lib", "-jar", filepath.Base(s.jar), "-inMemory", "-disableTelemetry", "-port", port)
	cmd.Dir = filepath.Dir(s.jar)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the test binary too, should it die before Main's cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting DynamoDB Local: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(s.exited) }()
	if err := s.waitReady(startWait, s.exited); err != nil {
		s.kill()
		b, _ := os.ReadFile(s.logf)
		return fmt.Errorf("DynamoDB Local on %s: %v\n%s", s.addr, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// waitReady polls ListTables until the server answers.
func (s *Server) waitReady(d time.Duration, exited <-chan struct{}) error {
	c := s.Client(func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("java exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
	if s.logf != "" {
		os.Remove(s.logf)
	}
}

// Stop kills the server (its data is gone: it runs in memory).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.External {
		t.Fatal("dynamotest: cannot stop an external server (unset IDEMPROXY_DYNAMODB_ENDPOINT)")
	}
	s.kill()
}

// Restart starts a stopped server again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.External {
		t.Fatal("dynamotest: cannot restart an external server (unset IDEMPROXY_DYNAMODB_ENDPOINT)")
	}
	if err := s.start(); err != nil {
		t.Fatalf("dynamotest: restart: %v", err)
	}
}

// Client returns a DynamoDB client for the server, with static credentials,
// Region, and the options given (an HTTPClient with a Faults transport, say).
func (s *Server) Client(opts ...func(*dynamodb.Options)) *dynamodb.Client {
	o := dynamodb.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("dynamotest", "dynamotest", ""),
		HTTPClient:   &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	}
	for _, fn := range opts {
		fn(&o)
	}
	return dynamodb.New(o)
}

// Env points the standard AWS configuration chain at the server for the rest of
// the test (AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, static credentials), and
// keeps it off the machine's own profiles and instance metadata.
func (s *Server) Env(t testing.TB) {
	t.Helper()
	for _, kv := range s.Environ(t.TempDir()) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Environ is what Env sets, as KEY=value pairs for a child process (the built
// proxy): its AWS config and credentials files point into dir, where there are none.
func (s *Server) Environ(dir string) []string {
	return []string{
		"AWS_ENDPOINT_URL_DYNAMODB=" + s.Endpoint,
		"AWS_REGION=" + Region,
		"AWS_ACCESS_KEY_ID=dynamotest",
		"AWS_SECRET_ACCESS_KEY=dynamotest",
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
		"AWS_CONFIG_FILE=" + filepath.Join(dir, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "aws-credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
	}
}
