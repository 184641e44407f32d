package proxy

import (
	"fmt"
	"strings"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

// compiledRoute is a route's configuration compiled, once, by Validate: what
// each state builds the route's handler from, at start and at every reload
// that keeps the configuration Validate compiled.
type compiledRoute struct {
	path     string // as configured; "" for the top level
	match    string // path in route form (middleware.Canonical.Route)
	enabled  bool
	settings middleware.Settings // config.Config.Compile's: plug-ins built, webhook secrets read
	rules    *reconcile.Rules    // nil: the route does not reconcile
}

// compileConfig compiles a route's core settings (config.Config.Compile,
// which reads its webhook secrets): every compile the proxy makes goes
// through it, so a test can count them.
var compileConfig = config.Config.Compile

// compileRoutes compiles the top level (first) and every route, each once,
// naming the flag, variable or file key at fault.
func (c *Config) compileRoutes() ([]compiledRoute, error) {
	top, err := c.compileRoute("", c.Config)
	if err != nil {
		return nil, c.named(err, nil, 0)
	}
	out := append(make([]compiledRoute, 0, 1+len(c.Routes)), top)
	seen := map[string]string{}
	for i := range c.Routes {
		r := &c.Routes[i]
		if !strings.HasPrefix(r.Path, "/") {
			return nil, fmt.Errorf("%s: path %q must start with /", r.where(i, "path"), r.Path)
		}
		_, match, err := middleware.CanonicalPath(r.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: path %q: %v", r.where(i, "path"), r.Path, err)
		}
		if prev, ok := seen[match]; ok {
			return nil, fmt.Errorf("%s: path %q appears twice (routes match in any case: %q is the same route)", r.where(i, "path"), r.Path, prev)
		}
		seen[match] = r.Path
		cr, err := c.compileRoute(match, c.Config.Merged(r.Config))
		if err != nil {
			return nil, c.named(err, r, i)
		}
		cr.path, cr.enabled = r.Path, r.Enabled
		out = append(out, cr)
	}
	return out, nil
}

// compileRoute compiles the core settings cc of the route matching match
// ("" for the top level) with what the proxy adds to them: a webhook route's
// key namespace, the reconcile rules.
func (c *Config) compileRoute(match string, cc config.Config) (compiledRoute, error) {
	s, err := compileConfig(cc)
	if err != nil {
		return compiledRoute{}, err
	}
	if s.Verifier != nil && !cc.IsSet("key_namespace") && match != "" {
		// A webhook route's keys are its own: two routes with the same
		// preset (two accounts of one provider) never share a record.
		s.KeyNamespace = match
	}
	rules, err := c.reconcileRules(cc, s)
	if err != nil {
		return compiledRoute{}, err
	}
	return compiledRoute{match: match, enabled: true, settings: s, rules: rules}, nil
}
