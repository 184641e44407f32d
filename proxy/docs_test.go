package proxy_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/proxy"
)

// Every flag --help lists is in the README's configuration table.
func TestREADMEListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	proxy.Usage(&help)
	flags := regexp.MustCompile(`(?m)^  --([a-z-]+)`).FindAllStringSubmatch(help.String(), -1)
	if len(flags) < 20 {
		t.Fatalf("found only %d flags in --help", len(flags))
	}
	for _, f := range flags {
		if !strings.Contains(string(readme), "`--"+f[1]+"`") {
			t.Errorf("README lacks --%s", f[1])
		}
	}
}
