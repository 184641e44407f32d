package main

// `idemproxy healthcheck`: a probe of a running instance's /readyz, for an
// image without a shell or curl (the Dockerfile's HEALTHCHECK).

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/proxy"
)

// healthMain probes /readyz of the instance this environment configures:
// its metrics listener, else its admin listener (with IDEMPROXY_ADMIN_TOKEN),
// as --metrics/--admin, IDEMPROXY_METRICS/IDEMPROXY_ADMIN and the config file
// (--config, IDEMPROXY_CONFIG) say, in that order; or --url. Exit 0: ready;
// 1: not ready or no answer; 2: usage.
func healthMain(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	target := fs.String("url", "", "")
	metrics := fs.String("metrics", "", "")
	admin := fs.String("admin", "", "")
	file := fs.String("config", getenv(proxy.EnvName("config")), "")
	timeout := fs.Duration("timeout", 3*time.Second, "")
	usage := `usage: idemproxy healthcheck [--url URL] [--metrics ADDR | --admin ADDR] [--config FILE] [--timeout 3s]

Asks a running idemproxy whether it is ready (GET /readyz: its store answers).
Without --url, it asks the metrics listener, else the admin listener, that the
flags, IDEMPROXY_METRICS / IDEMPROXY_ADMIN or the config file name (an address
of 0.0.0.0 or [::] is asked on loopback). Exit 0: ready; 1: not ready or no
answer; 2: usage.
`
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprint(stderr, usage)
		return 2
	}
	token := ""
	if *target == "" {
		addr, isAdmin, err := probeAddr(*metrics, *admin, *file, getenv)
		if err != nil {
			fmt.Fprintln(stderr, "idemproxy healthcheck:", err)
			return 2
		}
		*target = "http://" + addr + "/readyz"
		if isAdmin {
			token = getenv(proxy.EnvName("admin-token"))
		}
	}
	req, err := http.NewRequest(http.MethodGet, *target, nil)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy healthcheck:", err)
		return 2
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: *timeout}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "idemproxy healthcheck: %s: %v\n", *target, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "idemproxy healthcheck: %s: %s %s\n", *target, resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s\n", *target, strings.TrimSpace(string(body)))
	return 0
}

// probeAddr is where healthcheck asks: the metrics listener, else the admin
// one, each from its flag, its variable, then the config file.
func probeAddr(metrics, admin, file string, getenv func(string) string) (addr string, isAdmin bool, err error) {
	if metrics == "" {
		metrics = getenv(proxy.EnvName("metrics"))
	}
	if admin == "" {
		admin = getenv(proxy.EnvName("admin"))
	}
	if (metrics == "" || admin == "") && file != "" {
		c := proxy.DefaultConfig()
		if err := c.LoadFile(file); err != nil {
			return "", false, err
		}
		if metrics == "" {
			metrics = c.Metrics
		}
		if admin == "" {
			admin = c.Admin
		}
	}
	addr, isAdmin = metrics, false
	if addr == "" {
		addr, isAdmin = admin, true
	}
	if addr == "" {
		return "", false, fmt.Errorf("neither a metrics nor an admin listener is configured here (IDEMPROXY_METRICS, IDEMPROXY_ADMIN, the config file): give --url")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("%q: want host:port", addr)
	}
	if port == "0" {
		return "", false, fmt.Errorf("%s: the port is chosen at start (0): give --url with the one the start-up line names", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port), isAdmin, nil
}
