//go:build ignore

// Command peer-idemlease is idemlease's net/http middleware on its memory
// store in front of the same httputil.ReverseProxy as the bench's bare proxy
// (its transport settings and buffer pool copied, so the proxying is equal),
// for `bench -peer idemlease=…`. It imports a module that is not on the module
// proxy, so it is built by test/bench/peers/build.sh from a local checkout,
// outside every module of this repository (the ignore tag keeps it out of them).
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/repenguin22/idemlease/httpidem"
	"github.com/repenguin22/idemlease/memstore"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "")
	upstream := flag.String("upstream", "", "")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	// internal/forward.NewTransport(0) and forward.BufferPool, restated.
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  tr,
		BufferPool: &pool{},
	}
	// idemlease's defaults, with X-Request-Id added to what it replays (the
	// bench's upstream sends Content-Type; idemproxy replays every header).
	mw := httpidem.New(memstore.New(), httpidem.StoreHeaders("Content-Type", "Content-Language",
		"Content-Encoding", "Content-Disposition", "Location", "X-Request-Id"))
	srv := &http.Server{Addr: *listen, Handler: mw(rp), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Fatal(srv.ListenAndServe())
}

type pool struct{ p sync.Pool }

func (b *pool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *pool) Put(v []byte) { b.p.Put(&v) }
