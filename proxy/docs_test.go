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

// settingsRows returns the settings table's rows (docs/settings.md), keyed by
// the setting name in their first cell, as their cells.
func settingsRows(t *testing.T) map[string][]string {
	t.Helper()
	section := testutil.Docs(t, testutil.SettingsDoc)
	rows := map[string][]string{}
	name := regexp.MustCompile("^`([a-z_]+)`$")
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 4 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if m := name.FindStringSubmatch(cells[0]); m != nil {
			rows[m[1]] = cells
		}
	}
	return rows
}

// Every setting of the proxy and the core is a row of the settings table, with its
// flag, and the default the row states is the default in the code.
func TestSettingsTableMatchesTheConfigType(t *testing.T) {
	rows := settingsRows(t)
	fields := conf.Fields(reflect.TypeFor[proxy.Config]())
	if len(fields) < 25 {
		t.Fatalf("only %d settings found", len(fields))
	}
	def := proxy.DefaultConfig()
	for _, f := range fields {
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("settings table lacks `%s`", f.Name)
			continue
		}
		if row[1] != "`--"+f.FlagName()+"`" {
			t.Errorf("%s: flag cell %q, want `--%s`", f.Name, row[1], f.FlagName())
		}
		// The default is the cell before "what it does".
		cell := row[len(row)-2]
		var got proxy.Config
		switch {
		case cell == "none" && f.List():
			_ = f.Set(&got)
		case cell == "none": // an empty string
			_ = f.Set(&got, "")
		case cell == "required":
			continue
		case cell == "off": // an empty address
			_ = f.Set(&got, "")
		default:
			text := strings.Trim(cell, "`")
			if f.List() {
				var items []string
				for _, it := range strings.Split(text, ",") {
					items = append(items, strings.TrimSpace(it))
				}
				if err := f.Set(&got, items...); err != nil {
					t.Errorf("%s: default cell %q: %v", f.Name, cell, err)
				}
			} else if err := f.Set(&got, text); err != nil {
				t.Errorf("%s: default cell %q: %v", f.Name, cell, err)
				continue
			}
		}
		if f.Text(&got) != f.Text(&def) {
			t.Errorf("%s: the settings table says the default is %s, the code says %q", f.Name, cell, f.Text(&def))
		}
	}
}

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
