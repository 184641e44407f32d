package proxy

import (
	"runtime/debug"
	"strings"
)

// Version is the version the binary reports (`idemproxy --version`, the start-up
// log line, tracing's service.version). A build may set it with -ldflags "-X
// github.com/idemproxy/idemproxy/proxy.Version=…" (make build does, from git
// describe); otherwise it comes from the module's build info: the module version
// `go install …@v1.2.3` stamps, else the commit the binary was built from.
var Version string

func init() {
	if Version == "" {
		bi, ok := debug.ReadBuildInfo()
		Version = versionOf(bi, ok)
	}
}

// versionOf is the version a binary with build info bi reports: the main
// module's version (a release, or the pseudo-version Go derives from the
// checkout), else the VCS revision (its first 12 characters, "+dirty" when the
// tree had changes), else "devel".
func versionOf(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += "+dirty"
	}
	return strings.TrimSpace(rev)
}
