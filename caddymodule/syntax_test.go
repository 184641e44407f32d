package caddymodule

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// syntaxBlock is docs/caddy.md's syntax block as it must read: every
// subdirective the Caddyfile parser takes (the handler's own and the core's
// settings), then every store's block with its options.
func syntaxBlock() string {
	var b strings.Builder
	b.WriteString("idempotency [<matcher>] {\n")
	for _, s := range ownSubdirectives {
		b.WriteString("\t" + s.name + " " + s.args + "\n")
	}
	for _, f := range coreFields {
		b.WriteString("\t" + f.Name + " " + argsOf(f) + "\n")
	}
	b.WriteString("}\n")
	for _, k := range stores.Drivers {
		head := "store " + k.Name
		if k.Locator != "" {
			head += " <" + k.Locator + ">"
		}
		fields := stores.Fields(k.Settings())
		if len(fields) == 0 {
			b.WriteString("\n" + head + "\n")
			continue
		}
		b.WriteString("\n" + head + " {\n")
		for _, f := range fields {
			b.WriteString("\t" + f.Name + " " + argsOf(f) + "\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// argsOf is the form of a setting's arguments.
func argsOf(f conf.Field) string {
	switch {
	case f.Bool():
		return "[true|false]"
	case f.Int():
		return "<n>"
	case f.Duration():
		return "<duration>"
	case f.Bytes():
		return "<size>"
	case f.List():
		return "<values…>"
	}
	return "<value>"
}

// docs/caddy.md's syntax block lists every subdirective of the Caddyfile
// parser, and every store's options, with nothing else: it cannot drift from
// the parser.
func TestCaddyfileSyntaxBlock(t *testing.T) {
	b, err := os.ReadFile("../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Syntax\n")
	if !ok {
		t.Fatal("docs/caddy.md has no ## Syntax section")
	}
	_, rest, _ = strings.Cut(rest, "```caddy-d\n")
	got, _, _ := strings.Cut(rest, "```")
	if want := syntaxBlock(); got != want {
		t.Errorf("docs/caddy.md's syntax block is not the parser's list; want:\n%s", want)
	}
	// Every name listed is one the parser takes; one it does not is refused.
	for _, s := range ownSubdirectives {
		d := caddyfile.NewTestDispenser("idempotency {\n" + s.name + "\n}")
		if err := new(Handler).UnmarshalCaddyfile(d); err != nil && strings.Contains(err.Error(), "unknown subdirective") {
			t.Errorf("%s is listed but the parser does not take it: %v", s.name, err)
		}
	}
	d := caddyfile.NewTestDispenser("idempotency {\nnot_a_subdirective x\n}")
	if err := new(Handler).UnmarshalCaddyfile(d); err == nil || !strings.Contains(err.Error(), "unknown subdirective") {
		t.Errorf("an unknown subdirective: %v", err)
	}
	// Each of the handler's own JSON members is a subdirective.
	for name := range ownMembers {
		if name != "handler" && !slices.ContainsFunc(ownSubdirectives, func(s struct{ name, args string }) bool { return s.name == name }) {
			t.Errorf("JSON member %s has no subdirective in ownSubdirectives", name)
		}
	}
}
