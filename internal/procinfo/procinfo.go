// Package procinfo has small helpers for the benchmark and soak programs: free
// loopback addresses and a process's resident memory.
package procinfo

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free loopback port: %v", err))
	}
	defer l.Close()
	return l.Addr().String()
}

// RSSKiB returns the resident set size of process pid (0: this process) in KiB, or 0
// when it cannot be read (not Linux, or the process is gone).
func RSSKiB(pid int) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
