package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/idemproxy/idemproxy/internal/forward"
)

var upstreamBody = []byte(`{"id":"ch_1","object":"charge","amount":100,"currency":"eur","status":"succeeded"}`)

// upstreamMain serves a fixed JSON answer; ?delay=ms makes it slow.
func upstreamMain(args []string) {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "")
	_ = fs.Parse(args)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := r.URL.Query().Get("delay"); d != "" {
			ms, _ := strconv.Atoi(d)
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		if r.Body != nil {
			buf := make([]byte, 512)
			for {
				if _, err := r.Body.Read(buf); err != nil {
					break
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(upstreamBody)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(upstreamBody)
	})
	serve(*listen, h)
}

// bareProxyMain is httputil.ReverseProxy with the transport and copy-buffer pool
// idemproxy uses: the fair ceiling for a Go proxy.
func bareProxyMain(args []string) {
	fs := flag.NewFlagSet("bareproxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "")
	upstream := fs.String("upstream", "", "")
	_ = fs.Parse(args)
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  forward.NewTransport(0),
		BufferPool: forward.BufferPool{},
	}
	serve(*listen, rp)
}

func serve(addr string, h http.Handler) {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
