package proxy_test

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/proxy"
)

// docs/proxy.md names the settings a reload keeps until a restart: exactly
// those tagged reload:"restart", and then those whose turning on or off waits
// for one, tagged reload:"restart-on-off".
func TestRestartOnlySettingsDocumented(t *testing.T) {
	text := strings.Join(strings.Fields(testutil.Docs(t, "docs/proxy.md")), " ")
	_, after, ok := strings.Cut(text, "These settings take effect only at a restart")
	list, onOff, ok2 := strings.Cut(after, "turning TLS on or off")
	onOff, _, ok3 := strings.Cut(onOff, ".")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/proxy.md lacks the list of settings that take effect only at a restart")
	}
	for tag, list := range map[string]string{conf.ReloadRestart: list, conf.ReloadRestartOnOff: onOff} {
		var documented, tagged []string
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(list, -1) {
			documented = append(documented, m[1])
		}
		for _, f := range conf.Fields(reflect.TypeFor[proxy.Config]()) {
			if f.Reload == tag {
				tagged = append(tagged, f.Name)
			}
		}
		slices.Sort(documented)
		slices.Sort(tagged)
		if len(tagged) == 0 || !slices.Equal(documented, tagged) {
			t.Errorf("docs/proxy.md lists %q as waiting for a restart (%s); the tags say %q", documented, tag, tagged)
		}
	}
}
