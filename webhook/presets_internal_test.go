package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
)

// webhook_tolerance has one rule, here, for every surface: it must be positive
// for a preset that signs a timestamp; zero is refused, never read as the
// default (config refuses a set 0s with this same rule). A preset that signs no
// timestamp does not read it.
func TestToleranceRule(t *testing.T) {
	for _, p := range presets {
		w := Webhook{Preset: p.Name, Secrets: []string{"whsec_c2VjcmV0"}, Header: "X-Sig"}
		if !p.Custom {
			w.Header = ""
		}
		for _, tol := range []time.Duration{0, -time.Second, time.Second} {
			w.Tolerance = tol
			_, err := New(w)
			field, _ := fieldOf(err)
			wantErr := tol < 0 || tol == 0 && p.Timestamp
			if wantErr && (field != "webhook_tolerance" || !strings.Contains(err.Error(), "must be positive, got "+tol.String())) {
				t.Errorf("%s, tolerance %v: %v, want webhook_tolerance: must be positive", p.Name, tol, err)
			}
			if !wantErr && err != nil {
				t.Errorf("%s, tolerance %v: %v", p.Name, tol, err)
			}
		}
	}
}

// Adding a provider is one entry in presets: New, Verify (the tolerance
// included), Sign, KeySource, Names and the unknown-preset error all read it.
// The entry here is a made-up provider that signs "timestamp:body" in hex in
// X-Acme-Signature, its timestamp in X-Acme-Timestamp, and its event id in
// X-Acme-Event (signed).
func TestAPresetIsOneEntry(t *testing.T) {
	acme := Preset{
		Name: "acme", Header: "X-Acme-Signature", Timestamp: true, ID: "X-Acme-Event", SignsID: true,
		read: func(v *Verifier, h http.Header) (signed, error) {
			sigs, err := signatures(h, v.header)
			ts := h.Get("X-Acme-Timestamp")
			return signed{prefix: []byte(h.Get("X-Acme-Event") + ":" + ts + ":"), timestamp: ts, macs: decodeMACs(sigs, "", hex.DecodeString)}, err
		},
		sign: func(_ *Verifier, id, ts string, mac func(string) []byte, h http.Header) {
			h.Set("X-Acme-Timestamp", ts)
			h.Set("X-Acme-Signature", hex.EncodeToString(mac(id+":"+ts+":")))
		},
		key: func() middleware.KeySource { return middleware.HeaderKey{Name: "X-Acme-Event"} },
	}
	saved := presets
	presets = append(slices.Clone(presets), acme)
	t.Cleanup(func() { presets = saved })

	if !slices.Contains(Names(), "acme") {
		t.Fatalf("Names() = %v", Names())
	}
	if _, err := New(Webhook{Preset: "nope", Secrets: []string{"s"}}); err == nil || !strings.Contains(err.Error(), "github, hmac or acme") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := New(Webhook{Preset: "acme", Secrets: []string{"s"}}); err == nil || !strings.Contains(err.Error(), "webhook_tolerance") {
		t.Errorf("acme signs a timestamp, tolerance 0: %v", err)
	}
	w := Webhook{Preset: "acme", Secrets: []string{"s"}, Tolerance: time.Minute}
	v, err := New(w)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 0)
	v.now = func() time.Time { return at }
	body := []byte(`{"n":1}`)
	if _, err := w.Sign("", at, body); err == nil || err.Error() != "the acme preset signs a x-acme-event: give one" {
		t.Errorf("Sign without an id: %v", err)
	}
	h, err := w.Sign("evt_9", at, body)
	if err != nil {
		t.Fatal(err)
	}
	// The signature as the provider would compute it, apart from Sign.
	m := hmac.New(sha256.New, []byte("s"))
	m.Write([]byte("evt_9:" + strconv.FormatInt(at.Unix(), 10) + ":" + string(body)))
	if got := h.Get("X-Acme-Signature"); got != hex.EncodeToString(m.Sum(nil)) || h.Get("X-Acme-Event") != "evt_9" {
		t.Fatalf("Sign = %v", h)
	}
	if err := v.verifyHeader(h, body); err != nil {
		t.Fatalf("a signed delivery: %v", err)
	}
	if err := v.verifyHeader(h, append(body, ' ')); !errors.Is(err, errSigMismatch) {
		t.Errorf("tampered body: %v", err)
	}
	v.now = func() time.Time { return at.Add(2 * time.Minute) }
	if err := v.verifyHeader(h, body); !errors.Is(err, errSigOld) {
		t.Errorf("two minutes late, tolerance 1m: %v", err)
	}
	if k, err := v.KeySource().Key(&http.Request{Header: h}, body); err != nil || k != "evt_9" {
		t.Errorf("key %q, %v", k, err)
	}
	if v.Challenge() != `Webhook-Signature header="X-Acme-Signature"` || v.ID() != "acme" {
		t.Errorf("Challenge %q, ID %q", v.Challenge(), v.ID())
	}
}

// Each preset's key (key_source auto) is the one its description promises.
func TestPresetKeys(t *testing.T) {
	want := map[string]middleware.KeySource{Standard: standardID{}, GitHub: keysource.BodyDigest{}, HMAC: keysource.BodyDigest{}}
	want[Stripe], _ = keysource.NewJSON("/id")
	for _, p := range presets {
		if got := p.key(); got.ID() != want[p.Name].ID() {
			t.Errorf("%s: key %s, want %s", p.Name, got.ID(), want[p.Name].ID())
		}
	}
}

// Every preset has its row in the table of docs/webhooks.md.
func TestEveryPresetIsDocumented(t *testing.T) {
	doc := testutil.Docs(t, "docs/webhooks.md")
	for _, name := range Names() {
		if !strings.Contains(doc, "\n| `"+name+"`") {
			t.Errorf("docs/webhooks.md: the presets' table has no row for %s", name)
		}
	}
}
