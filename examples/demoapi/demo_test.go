package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// make demo's start step (examples/demo.sh) refuses at once, naming the port
// and the variable that moves it, when one of its ports is taken by another
// server: without the check, the tour ran against whatever answered there and
// printed 502s for a minute.
func TestDemoRefusesATakenPort(t *testing.T) {
	for _, variable := range []string{"DEMO_API_PORT", "DEMO_PROXY_PORT", "DEMO_ADMIN_PORT"} {
		t.Run(variable, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.NotFoundHandler()}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

			// The other two ports are left as they are (their defaults, or
			// whatever the environment says): the script names every taken
			// port, so this one is named whatever the others are.
			env := append(os.Environ(), "DEMO_ONCE=1", variable+"="+port)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "../demo.sh")
			cmd.Env = env
			began := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(began)
			if err == nil {
				t.Fatalf("demo.sh exited 0 with %s=%s taken:\n%s", variable, port, out)
			}
			if took > 5*time.Second {
				t.Errorf("demo.sh took %v to give up on a taken port", took)
			}
			for _, want := range []string{port, variable} {
				if !strings.Contains(string(out), want) {
					t.Errorf("demo.sh's message does not name %s:\n%s", want, out)
				}
			}
		})
	}
}
