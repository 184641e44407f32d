package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// keys --caddy ADDR sends its requests where Caddy's admin endpoint serves
// the module's routes, ADDR as Caddy's admin option writes it (host:port, a
// URL, a unix socket with or without its |mode): under /idempotency, by
// hash, with ?handler=, POSTs as JSON, and no idemproxy admin token.
func TestKeysCaddyAddresses(t *testing.T) {
	var got []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" ct="+r.Header.Get("Content-Type")+" auth="+r.Header.Get("Authorization")+" "+string(body))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/idempotency/keys" && r.URL.Query().Has("state") {
			io.WriteString(w, `{"held":[{"key_hash":"abcabcabcabc","hash":"abcabcabcabc"}]}`)
			return
		}
		io.WriteString(w, `{"released":true}`)
	})
	tcp := httptest.NewServer(h)
	defer tcp.Close()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	unix := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	unix.Start()
	defer unix.Close()
	env := func(name string) string {
		if name == "IDEMPROXY_ADMIN_TOKEN" {
			return "proxy-secret"
		}
		return ""
	}
	for _, addr := range []string{strings.TrimPrefix(tcp.URL, "http://"), tcp.URL + "/", "unix/" + sock, "unix/" + sock + "|0660"} {
		got = nil
		var out, errs bytes.Buffer
		if code := keysMain([]string{"release", "--hash", "abcabcabcabc", "--caddy", addr, "--handler", "charges"}, nil, &out, &errs, env); code != 0 {
			t.Fatalf("--caddy %s: release: exit %d: %s", addr, code, errs.String())
		}
		if code := keysMain([]string{"list", "--held", "--caddy", addr}, nil, &out, &errs, env); code != 0 || !strings.Contains(out.String(), "abcabcabcabc") {
			t.Fatalf("--caddy %s: list: exit %d: %s %s", addr, code, out.String(), errs.String())
		}
		want := []string{
			"POST /idempotency/release?handler=charges&hash=abcabcabcabc ct=application/json auth= ",
			"GET /idempotency/keys?state=held ct= auth= ",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("--caddy %s: the admin endpoint got\n%s\nwant\n%s", addr, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	for _, args := range [][]string{
		{"get", "--hash", "abcabcabcabc", "--caddy", "localhost"},                      // no port
		{"get", "--hash", "abcabcabcabc", "--caddy", "unix/"},                          // no socket
		{"get", "k1", "--caddy", "localhost:2019"},                                     // a key: by hash only
		{"get", "--hash", "abcabcabcabc", "--caddy", "localhost:2019", "--path", "/x"}, // a route: idemproxy's
		{"get", "--hash", "abcabcabcabc", "--handler", "charges"},                      // --handler without --caddy
	} {
		var out, errs bytes.Buffer
		if code := keysMain(args, nil, &out, &errs, env); code != 2 || errs.Len() == 0 {
			t.Errorf("keys %s: exit %d (%s); want 2 with a reason", strings.Join(args, " "), code, errs.String())
		}
	}
}
