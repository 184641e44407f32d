package caddymodule

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// Every JSON field of the handler is a Caddyfile subdirective in the README's table.
func TestREADMEListsEverySubdirective(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeOf(Handler{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !strings.Contains(string(readme), "`"+name) {
			t.Errorf("README lacks the %s subdirective", name)
		}
	}
}
