package main

import (
	"strings"
	"testing"
)

// A help text's marks: 'x' is code where a quote can open and close a
// literal, an apostrophe stays one; setting names, flags and variables are
// code; a docs page is a link titled by the heading it names; | is escaped.
// A literal left open, or a link to no page or heading, is an error.
func TestMarkdown(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := &model{root: root, names: map[string]bool{"lock_ttl": true, "max_body": true}}
	for in, want := range map[string]string{
		"'hold' or 'release'":                       "`hold` or `release`",
		"Redis's maxmemory-policy, clients' keys":   "Redis's maxmemory-policy, clients' keys",
		"a client's '400' ('invalid-key')":          "a client's `400` (`invalid-key`)",
		"at least lock_ttl, not other_name":         "at least `lock_ttl`, not other_name",
		"set --max-body or IDEMPROXY_MAX_BODY":      "set `--max-body` or `IDEMPROXY_MAX_BODY`",
		"a | b":                                     `a \| b`,
		"'- . _ ~', not ending in '.' (or 'a|b')":   "`- . _ ~`, not ending in `.` (or `a\\|b`)",
		"see docs/stores.md#durability-trade-offs)": "see [Durability trade-offs](stores.md#durability-trade-offs))",
		"see docs/stores.md":                        "see [Stores](stores.md)",
		"the lease's end; max_body's size":          "the lease's end; `max_body`'s size",
	} {
		got, err := m.markdown(in)
		if err != nil || got != want {
			t.Errorf("markdown(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"an 'open literal", "see docs/nowhere.md", "see docs/stores.md#no-such-heading"} {
		if got, err := m.markdown(in); err == nil {
			t.Errorf("markdown(%q) = %q, want an error", in, got)
		} else if !strings.Contains(err.Error(), in) {
			t.Errorf("markdown(%q): %v does not quote the text", in, err)
		}
	}
}
