package config

import (
	"strings"

	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/webhook"
)

// HelpList implements conf.Lister: the values of the settings that name a
// plug-in, as their packages list them (webhook.Presets, keysource.Kinds,
// errformat.Formats), for the ${name}s in the settings' help.
func (Config) HelpList(name string) (string, bool) {
	switch name {
	case "webhook":
		return conf.OrList(literals(webhook.Names())), true
	case "webhook_timestamp", "webhook_custom":
		var names []string
		for _, p := range webhook.Presets() {
			if name == "webhook_timestamp" && p.Timestamp || name == "webhook_custom" && p.Custom {
				names = append(names, literal(p.Name))
			}
		}
		return strings.Join(names, ", "), true
	case "webhook_encoding":
		return conf.OrList(literals(webhook.Encodings())), true
	case "key_source":
		var specs []string
		for _, k := range keysource.Kinds() {
			specs = append(specs, withHelp(k.Spec(), k.Help))
		}
		return conf.OrList(specs), true
	case "error_format":
		var names []string
		for _, f := range errformat.Formats() {
			names = append(names, withHelp(f.Name, f.Help))
		}
		return strings.Join(names, ", "), true
	}
	return "", false
}

// withHelp is a value with its few words of help, if any: "'body' (a digest
// of it)".
func withHelp(value, help string) string {
	if help == "" {
		return literal(value)
	}
	return literal(value) + " (" + help + ")"
}

// literal marks a value as one in help text: 'stripe' (code in the settings
// table, test/settingsdoc).
func literal(value string) string { return "'" + value + "'" }

func literals(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = literal(v)
	}
	return out
}
