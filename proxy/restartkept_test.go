package proxy

import (
	"slices"
	"testing"
	"time"
)

// A reload keeps the running values of the settings tagged reload:"restart",
// and TLS on or off (reload:"restart-on-off"), names them, and leaves the
// configuration it was given as it was; a new certificate file for a listener
// that already serves TLS takes effect.
func TestRestartKept(t *testing.T) {
	old := DefaultConfig()
	old.TLSCert, old.TLSKey = "a.pem", "a.key"
	next := DefaultConfig()
	next.Listen, next.IdleTimeout, next.AdminHosts = "127.0.0.1:9999", time.Hour, []string{}
	next.TTL = time.Hour // takes effect
	given := next

	kept, changed := restartKept(&old, &next)
	if want := []string{"listen", "idle_timeout", "tls_cert (on or off)", "tls_key (on or off)"}; !slices.Equal(changed, want) {
		t.Errorf("named %q, want %q (an empty admin_hosts is no admin_hosts)", changed, want)
	}
	if kept.Listen != old.Listen || kept.IdleTimeout != old.IdleTimeout || kept.TLSCert != old.TLSCert || kept.TLSKey != old.TLSKey {
		t.Errorf("kept %q %v %q %q: not the running values", kept.Listen, kept.IdleTimeout, kept.TLSCert, kept.TLSKey)
	}
	if kept.TTL != time.Hour {
		t.Errorf("ttl %v: a setting that takes effect was kept", kept.TTL)
	}
	if next.Listen != given.Listen || next.IdleTimeout != given.IdleTimeout || next.TTL != given.TTL {
		t.Error("restartKept changed the configuration it was given")
	}

	next = DefaultConfig()
	next.TLSCert, next.TLSKey = "b.pem", "b.key"
	kept, changed = restartKept(&old, &next)
	if len(changed) != 0 || kept.TLSCert != "b.pem" || kept.TLSKey != "b.key" {
		t.Errorf("a new certificate with TLS on: named %q, files %q %q", changed, kept.TLSCert, kept.TLSKey)
	}
}
