package proxy

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "8e94fc5436ea3c607141110ad67415acc5d5955f"}}
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "devel"},
		{"go install @v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "v1.2.3"},
		{"pseudo-version from a checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125002505-8e94fc5436ea+dirty"}, Settings: rev},
			true, "v0.0.0-20261125002505-8e94fc5436ea+dirty"},
		{"revision only", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev}, true, "8e94fc5436ea"},
		{"revision, modified tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: append(rev[:2:2], debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, true, "8e94fc5436ea+dirty"},
		{"clean tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: append(rev[:2:2], debug.BuildSetting{Key: "vcs.modified", Value: "false"})}, true, "8e94fc5436ea"},
		{"nothing stamped", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "devel"},
	}
	for _, c := range cases {
		if got := versionOf(c.bi, c.ok); got != c.want {
			t.Errorf("%s: versionOf = %q, want %q", c.name, got, c.want)
		}
	}
}

// go.mod's go line is what every importer must build with: a release line
// (1.26, or 1.26.0 when a dependency says so), never a patch release that
// would force importers onto it.
func TestGoModNoPatchRelease(t *testing.T) {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "go ")
		if !ok {
			continue
		}
		parts := strings.Split(strings.TrimSpace(v), ".")
		if len(parts) == 3 && parts[2] != "0" {
			t.Errorf("go.mod says %q: importers would need that patch release; say go 1.%s", line, parts[1])
		}
		return
	}
	t.Fatal("go.mod has no go line")
}
