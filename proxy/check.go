package proxy

import (
	"log/slog"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/conf"
)

// idemproxy validate's check: what start-up would build, without the store.

// Check builds cfg's state as start-up does, over a memory store.
func Check(cfg *Config) error {
	p := &Proxy{log: slog.New(slog.DiscardHandler), metrics: newMetrics()}
	st, err := p.prepareState(cfg)
	if err != nil {
		return err
	}
	mem, err := memstore.New(memstore.Options{MaxRecords: 1})
	if err != nil {
		return err
	}
	defer mem.Close()
	st.cache = mem
	return p.buildRoutes(st)
}

// File is the configuration file cfg was read from ("" when none: flags and
// variables alone).
func (c *Config) File() string { return c.file }

// Fields are the proxy's settings, as flags, variables and file keys read them.
func Fields() []conf.Field { return fields() }
