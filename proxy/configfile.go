package proxy

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// LoadFile merges the file at path (YAML, or JSON, which is YAML) into c: its
// keys are the settings' names, and routes a list of routes (path, enabled and
// the core's settings). Every error names the file, the line and the key: an
// unknown key, a value of the wrong kind ("unknown_hold: 2days"), a bad route.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config file %s: %s", path, oneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if len(doc.Content) == 0 {
		return nil // an empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s line %d: want a mapping of settings (key: value)", path, root.Line)
	}
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("config file %s line %d: %s", path, n.Line, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return at(k, "%s appears twice", k.Value)
		}
		seen[k.Value] = true
		if k.Value == "routes" {
			routes, err := loadRoutes(path, v, at)
			if err != nil {
				return err
			}
			c.Routes = routes
			continue
		}
		f, ok := conf.Lookup(fields(), k.Value)
		if !ok {
			return at(k, "unknown setting %q", k.Value)
		}
		if err := setFromNode(c, f, v); err != nil {
			return at(v, "%s: %v", k.Value, err)
		}
		c.note(f.Name, fmt.Sprintf("%s in %s (line %d)", f.Name, path, k.Line))
	}
	return nil
}

// loadRoutes reads the routes list.
func loadRoutes(path string, v *yaml.Node, at func(*yaml.Node, string, ...any) error) ([]Route, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, at(v, "routes: want a list of routes (- path: /charges …)")
	}
	var routes []Route
	for i, item := range v.Content {
		if item.Kind != yaml.MappingNode {
			return nil, at(item, "routes[%d]: want a mapping (path: /charges …)", i)
		}
		r := Route{Enabled: true, file: path, line: item.Line, lines: map[string]int{}}
		seen := map[string]bool{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			if seen[k.Value] {
				return nil, at(k, "routes[%d]: %s appears twice", i, k.Value)
			}
			seen[k.Value] = true
			r.lines[k.Value] = k.Line
			switch k.Value {
			case "path":
				if val.Kind != yaml.ScalarNode || val.Tag == "!!null" {
					return nil, at(val, "routes[%d]: path: want a path such as /charges", i)
				}
				r.Path = val.Value
			case "enabled":
				if val.Kind != yaml.ScalarNode || val.Tag != "!!bool" {
					return nil, at(val, "routes[%d]: enabled: want true or false", i)
				}
				r.Enabled = val.Value == "true"
			default:
				f, ok := conf.Lookup(routeFields, k.Value)
				if !ok {
					return nil, at(k, "routes[%d]: unknown setting %q (a route takes path, enabled and the core's settings)", i, k.Value)
				}
				if err := setFromNode(&r.Config, f, val); err != nil {
					return nil, at(val, "routes[%d]: %s: %v", i, k.Value, err)
				}
			}
		}
		if !seen["path"] {
			return nil, at(item, "routes[%d]: path is required", i)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

// setFromNode sets field f of *ptr from a YAML value: a scalar, or a list of
// scalars for a list.
func setFromNode(ptr any, f conf.Field, v *yaml.Node) error {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return errors.New("no value")
	case v.Kind == yaml.ScalarNode:
		return f.Set(ptr, v.Value)
	case v.Kind == yaml.SequenceNode && f.List():
		items := make([]string, len(v.Content))
		for i, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return fmt.Errorf("item %d is not a value", i)
			}
			items[i] = it.Value
		}
		return f.Set(ptr, items...)
	case v.Kind == yaml.SequenceNode:
		return errors.New("a list; want one value")
	}
	return errors.New("a mapping; want a value")
}

// oneLine folds a multi-line message onto one line.
func oneLine(msg string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
}
