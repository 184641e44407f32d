package localcache

import (
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// The default size of a local cache: a share of the process's memory budget,
// within a floor and a cap. The budget is GOMEMLIMIT when set (the Go
// runtime's soft limit, debug.SetMemoryLimit), else the memory limit of the
// process's cgroup (v2 memory.max, v1 memory.limit_in_bytes) when it has one.
const (
	// DefaultShare is the budget's share: 1/16.
	DefaultShare = 16
	// DefaultFloor and DefaultCap bound the share.
	DefaultFloor = 8 << 20
	DefaultCap   = 256 << 20
	// DefaultUnbounded is the size when no budget is known.
	DefaultUnbounded = 64 << 20
)

// Auto is a store setting's local cache size when it is "auto" (the
// default): the store picks DefaultSize. It is the value internal/conf gives
// a size tagged size:"auto" set to "auto".
const Auto = -1

// DefaultSize is the default size of a local cache, and what it was taken
// from ("GOMEMLIMIT 1GiB", "cgroup memory limit 512MiB", "no memory limit"),
// for the log line that says so.
func DefaultSize() (int64, string) {
	return defaultSize(debug.SetMemoryLimit(-1), cgroupLimit())
}

func defaultSize(memLimit, cgroup int64) (int64, string) {
	var budget int64
	var from string
	switch {
	case memLimit > 0 && memLimit < math.MaxInt64:
		budget, from = memLimit, "GOMEMLIMIT "+formatMiB(memLimit)
	case cgroup > 0:
		budget, from = cgroup, "cgroup memory limit "+formatMiB(cgroup)
	default:
		return DefaultUnbounded, "no memory limit (GOMEMLIMIT, cgroup)"
	}
	return min(max(budget/DefaultShare, DefaultFloor), DefaultCap), from
}

func formatMiB(n int64) string { return strconv.FormatInt(n>>20, 10) + "MiB" }

// cgroupLimit is the memory limit of this process's cgroup, or 0 when it has
// none or it cannot be read (not Linux, no cgroup file system).
func cgroupLimit() int64 {
	own, _ := os.ReadFile("/proc/self/cgroup")
	var v2, v1 string
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) < 3:
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	for _, f := range []string{
		path.Join("/sys/fs/cgroup", v2, "memory.max"), "/sys/fs/cgroup/memory.max",
		path.Join("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"), "/sys/fs/cgroup/memory/memory.limit_in_bytes",
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited" (close to MaxInt64)
			return 0
		}
		return n
	}
	return 0
}
