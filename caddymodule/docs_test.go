package caddymodule

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Every JSON field of the handler is a Caddyfile subdirective in the settings table.
func TestSettingsTableListsEverySubdirective(t *testing.T) {
	table := testutil.Docs(t, testutil.SettingsDoc)
	typ := reflect.TypeOf(Handler{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !strings.Contains(table, "`"+name) {
			t.Errorf("the settings table lacks the %s subdirective", name)
		}
	}
}
