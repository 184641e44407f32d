// Command grpcupstream serves the test service of package grpctest as a
// process of its own, which a test can kill mid-call: it listens on -listen
// (cleartext HTTP/2) and prints "listening ADDR" once it does.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemproxy/idemproxy/test/grpctest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcupstream:", err)
		os.Exit(1)
	}
	srv := (&grpctest.Server{}).Serve(ln)
	fmt.Println("listening", ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	srv.Stop()
}
