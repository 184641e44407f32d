package webhook

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
)

// A Preset is one provider's signature scheme, described once: New and Verify,
// KeySource (the key of key_source auto), Sign (`idemproxy sign`), and the
// configuration's help and errors all read it. A provider is one entry in
// presets.
type Preset struct {
	// Name is the value of the webhook setting: "stripe".
	Name string
	// Header carries the signature. Empty for a Custom preset, whose header
	// is a setting (webhook_header).
	Header string
	// Timestamp: the signature covers a Unix time, which must be within the
	// tolerance of now (webhook_tolerance).
	Timestamp bool
	// ID is the header of the delivery's id, if the provider sends one;
	// SignsID, the signature covers it (Sign needs one).
	ID      string
	SignsID bool
	// Custom: the signature's header, encoding and prefix are settings
	// (webhook_header, webhook_encoding, webhook_prefix).
	Custom bool

	// secret makes the HMAC key of a secret as the provider shows it; nil:
	// the secret's bytes.
	secret func(string) ([]byte, error)
	// read returns what a delivery says was signed, or why it carries no
	// signature (errSigMissing).
	read func(v *Verifier, h http.Header) (signed, error)
	// sign sets the headers that carry a signature made by mac over
	// prefix+body, where ts is the Unix time signed and id the delivery id
	// (set apart, in ID).
	sign func(v *Verifier, id, ts string, mac func(prefix string) []byte, h http.Header)
	// key is the preset's key (key_source auto).
	key func() middleware.KeySource
}

// signed is what a delivery says was signed: the text signed before the body,
// the Unix time (a Timestamp preset), and the candidate MACs, decoded.
type signed struct {
	prefix    []byte
	timestamp string
	macs      [][]byte
}

// presets are the webhook presets, in the order help lists them.
var presets = []Preset{
	{
		Name: Standard, Header: webhookNames.signature, Timestamp: true, ID: webhookNames.id, SignsID: true,
		secret: standardSecret, read: readStandard,
		sign: func(v *Verifier, id, ts string, mac func(string) []byte, h http.Header) {
			h.Set(webhookNames.timestamp, ts)
			h.Set(v.header, "v1,"+base64.StdEncoding.EncodeToString(mac(id+"."+ts+".")))
		},
		key: func() middleware.KeySource { return standardID{} },
	},
	{
		Name: Stripe, Header: "Stripe-Signature", Timestamp: true,
		read: readStripe,
		sign: func(v *Verifier, _, ts string, mac func(string) []byte, h http.Header) {
			h.Set(v.header, "t="+ts+",v1="+hex.EncodeToString(mac(ts+".")))
		},
		key: func() middleware.KeySource {
			ks, _ := keysource.NewJSON("/id") // a valid pointer
			return ks
		},
	},
	{
		Name: GitHub, Header: "X-Hub-Signature-256", ID: "X-GitHub-Delivery",
		read: func(v *Verifier, h http.Header) (signed, error) {
			sigs, err := signatures(h, v.header)
			return signed{macs: decodeMACs(sigs, "sha256=", hex.DecodeString)}, err
		},
		sign: func(v *Verifier, _, _ string, mac func(string) []byte, h http.Header) {
			h.Set(v.header, "sha256="+hex.EncodeToString(mac("")))
		},
		key: bodyDigest,
	},
	{
		Name: HMAC, Custom: true,
		read: func(v *Verifier, h http.Header) (signed, error) {
			sigs, err := signatures(h, v.header)
			return signed{macs: decodeMACs(sigs, v.Prefix, v.encoding.decode)}, err
		},
		sign: func(v *Verifier, _, _ string, mac func(string) []byte, h http.Header) {
			h.Set(v.header, v.Prefix+v.encoding.encode(mac("")))
		},
		key: bodyDigest,
	},
}

// An encoding is how a Custom preset's signature is written (webhook_encoding).
type encoding struct {
	name   string
	encode func([]byte) string
	decode func(string) ([]byte, error)
}

// encodings are the encodings of a Custom preset's signature, the default
// first.
var encodings = []encoding{
	{"hex", hex.EncodeToString, hex.DecodeString},
	{"base64", base64.StdEncoding.EncodeToString, base64.StdEncoding.DecodeString},
}

// Presets returns the webhook presets.
func Presets() []Preset { return slices.Clone(presets) }

// Names returns the presets' names: the values of the webhook setting.
func Names() []string { return names(func(Preset) bool { return true }) }

// Encodings returns the encodings of a Custom preset's signature, the default
// first: the values of webhook_encoding.
func Encodings() []string {
	var out []string
	for _, e := range encodings {
		out = append(out, e.name)
	}
	return out
}

// names returns the names of the presets keep keeps.
func names(keep func(Preset) bool) []string {
	var out []string
	for _, p := range presets {
		if keep(p) {
			out = append(out, p.Name)
		}
	}
	return out
}

// lookup returns the preset named name.
func lookup(name string) (Preset, bool) {
	i := slices.IndexFunc(presets, func(p Preset) bool { return p.Name == name })
	if i < 0 {
		return Preset{}, false
	}
	return presets[i], true
}

func bodyDigest() middleware.KeySource { return keysource.BodyDigest{} }

// signatures returns the values of the signature's header, or errSigMissing.
func signatures(h http.Header, name string) ([]string, error) {
	sigs := h.Values(name)
	if len(sigs) == 0 || sigs[0] == "" {
		return nil, fmt.Errorf("%w: no %s header", errSigMissing, name)
	}
	return sigs, nil
}

// decodeMACs returns the candidates that carry prefix and decode to a
// SHA-256 MAC, decoded; the others cannot match.
func decodeMACs(candidates []string, prefix string, decode func(string) ([]byte, error)) [][]byte {
	var out [][]byte
	for _, c := range candidates {
		out = appendMAC(out, c, prefix, decode)
	}
	return out
}

// appendMAC appends candidate to macs, decoded, if it carries prefix and
// decodes to a SHA-256 MAC.
func appendMAC(macs [][]byte, candidate, prefix string, decode func(string) ([]byte, error)) [][]byte {
	c, ok := strings.CutPrefix(strings.TrimSpace(candidate), prefix)
	if !ok {
		return macs
	}
	if b, err := decode(c); err == nil && len(b) == macSize {
		return append(macs, b)
	}
	return macs
}

// readStripe reads Stripe-Signature, "t=…,v1=<hex>,…": the signature over
// t.body; the first t counts.
func readStripe(v *Verifier, h http.Header) (signed, error) {
	sigs, err := signatures(h, v.header)
	if err != nil {
		return signed{}, err
	}
	var t string
	var macs [][]byte
	v1 := false
	for _, part := range strings.Split(strings.Join(sigs, ","), ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			if t == "" {
				t = val
			}
		case "v1":
			v1 = true
			macs = appendMAC(macs, val, "", hex.DecodeString)
		}
	}
	if t == "" || !v1 {
		return signed{}, fmt.Errorf("%w: Stripe-Signature needs t= and v1=", errSigMissing)
	}
	return signed{prefix: []byte(t + "."), timestamp: t, macs: macs}, nil
}
