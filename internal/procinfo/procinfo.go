// Package procinfo has small helpers for the benchmark and soak programs: free
// loopback addresses, a process's resident memory and its CPU time.
package procinfo

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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
func RSSKiB(pid int) int64 { return statusKiB(pid, "VmRSS:") }

// PeakRSSKiB returns the largest resident set size process pid (0: this process)
// has had (its high-water mark, VmHWM) in KiB, or 0 when it cannot be read.
func PeakRSSKiB(pid int) int64 { return statusKiB(pid, "VmHWM:") }

// statusKiB reads one kB field of /proc/<pid>/status.
func statusKiB(pid int, field string) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// CPUTime returns the user plus system CPU time process pid has used, from
// /proc/<pid>/stat (Linux; clock ticks of 10ms), or -1 when it cannot be read.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; the fields after it start
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// TreeCPUTime returns the CPU time of process pid and of its live children (a
// PostgreSQL postmaster and its backends), or -1 when pid cannot be read.
func TreeCPUTime(pid int) time.Duration {
	total := CPUTime(pid)
	if total < 0 {
		return -1
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if d := CPUTime(child); d > 0 {
				total += d
			}
		}
	}
	return total
}

// SelfCPUTime returns the CPU time this process has used (every thread).
func SelfCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
