package middleware_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/fingerprint"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

func bodyFingerprint(t *testing.T, mode string, ignore ...string) middleware.Option {
	t.Helper()
	bf, err := fingerprint.Parse(mode, ignore)
	if err != nil {
		t.Fatal(err)
	}
	return func(s *middleware.Settings) { s.BodyFingerprint = bf }
}

func problemDetail(t *testing.T, body []byte) string {
	t.Helper()
	var p middleware.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem %q: %v", body, err)
	}
	return p.Detail
}

// A retry that means the same replays; one that means something else gets
// 422 naming the parts that differ, never a value.
func TestBodyFingerprintNamesWhatDiffers(t *testing.T) {
	first := req{Key: "k", Body: `{"amount":1000,"currency":"EUR","request_time":"t1","note":"secret-note"}`,
		Header: http.Header{"X-Tenant": {"a"}, "Date": {"Mon"}}}
	for _, c := range []struct {
		name       string
		retry      req
		wantStatus int
		wantDetail []string // substrings
		notDetail  []string
	}{
		{"re-serialised", req{Key: "k", Body: "{\n \"currency\": \"\\u0045UR\", \"note\":\"secret-note\",\n \"amount\": 1000.0, \"request_time\": \"t2\"}",
			Header: http.Header{"X-Tenant": {"a"}, "Date": {"Tue"}}}, 201, nil, nil},
		{"a member differs", req{Key: "k", Body: `{"amount":2000,"currency":"EUR","request_time":"t1","note":"secret-note2"}`,
			Header: http.Header{"X-Tenant": {"a"}}}, 422, []string{"/amount", "/note"}, []string{"2000", "1000", "secret", "/currency"}},
		{"a member missing", req{Key: "k", Body: `{"amount":1000,"currency":"EUR"}`, Header: http.Header{"X-Tenant": {"a"}}},
			422, []string{"/note"}, []string{"/amount", "request_time"}},
		{"a header differs", req{Key: "k", Body: first.Body, Header: http.Header{"X-Tenant": {"b"}}},
			422, []string{"the header X-Tenant"}, []string{"/amount", `"b"`}},
		{"the path differs", req{Key: "k", Target: "/other", Body: first.Body, Header: http.Header{"X-Tenant": {"a"}}},
			422, []string{"the path"}, []string{"/amount"}},
		{"the shape differs", req{Key: "k", Body: `[1000]`, Header: http.Header{"X-Tenant": {"a"}}},
			422, []string{"the body"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cnt := &counter{}
			h := newHandler(t, newMem(t), bodyFingerprint(t, fingerprint.JSON, "/request_time"),
				func(s *middleware.Settings) { s.FingerprintHeaders = []string{"x-tenant"} }).Wrap(cnt)
			if w := serve(h, first); w.Code != 201 {
				t.Fatalf("first: %d %s", w.Code, w.Body)
			}
			w := serve(h, c.retry)
			if w.Code != c.wantStatus {
				t.Fatalf("retry: %d %s", w.Code, w.Body)
			}
			if c.wantStatus == 201 {
				if w.Header().Get("Idempotent-Replayed") != "true" || cnt.Calls.Load() != 1 {
					t.Fatalf("not replayed: %v, %d calls", w.Header(), cnt.Calls.Load())
				}
				return
			}
			checkProblem(t, w.Header(), w.Body.Bytes(), 422, middleware.ProblemMismatch)
			d := problemDetail(t, w.Body.Bytes())
			for _, s := range c.wantDetail {
				if !strings.Contains(d, s) {
					t.Errorf("detail %q does not name %q", d, s)
				}
			}
			for _, s := range c.notDetail {
				if strings.Contains(d, s) {
					t.Errorf("detail %q names %q", d, s)
				}
			}
		})
	}
}

func TestBodyFingerprintFormAndMultipartName(t *testing.T) {
	h := newHandler(t, newMem(t), bodyFingerprint(t, fingerprint.Form)).Wrap(&counter{})
	serve(h, req{Key: "f", Body: "a=1&b=2"})
	if w := serve(h, req{Key: "f", Body: "b=2&a=1"}); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("reordered form: %d %s", w.Code, w.Body)
	}
	w := serve(h, req{Key: "f", Body: "b=3&a=1"})
	if d := problemDetail(t, w.Body.Bytes()); w.Code != 422 || !strings.Contains(d, `form field "b"`) || strings.Contains(d, "3") {
		t.Fatalf("%d %q", w.Code, d)
	}

	h = newHandler(t, newMem(t), bodyFingerprint(t, fingerprint.Multipart)).Wrap(&counter{})
	mp := func(boundary, v1, v2 string) req {
		return req{Key: "m", Header: http.Header{"Content-Type": {"multipart/form-data; boundary=" + boundary}},
			Body: fmt.Sprintf("--%[1]s\r\nContent-Disposition: form-data; name=a\r\n\r\n%[2]s\r\n--%[1]s\r\nContent-Disposition: form-data; name=b\r\n\r\n%[3]s\r\n--%[1]s--\r\n", boundary, v1, v2)}
	}
	serve(h, mp("xx", "1", "2"))
	if w := serve(h, mp("yyyy", "1", "2")); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("new boundary: %d %s", w.Code, w.Body)
	}
	w = serve(h, mp("zz", "1", "3"))
	if d := problemDetail(t, w.Body.Bytes()); w.Code != 422 || !strings.Contains(d, "multipart part 2") || strings.Contains(d, "part 1") {
		t.Fatalf("%d %q", w.Code, d)
	}
}

// A body the route's reading cannot read one way only is refused, never
// forwarded or claimed: the key stays free.
func TestBodyFingerprintRefusesAmbiguousBody(t *testing.T) {
	cnt := &counter{}
	h := newHandler(t, newMem(t), bodyFingerprint(t, fingerprint.JSON)).Wrap(cnt)
	for _, body := range []string{`{"a":1,"a":2}`, `{"n":9007199254740993}`, `{"a":`, "[\"\xff\"]"} {
		w := serve(h, req{Key: "k", Body: body})
		checkProblem(t, w.Header(), w.Body.Bytes(), 400, middleware.ProblemBodyMalformed)
	}
	if cnt.Calls.Load() != 0 {
		t.Fatal("a refused body was forwarded")
	}
	if w := serve(h, req{Key: "k", Body: `{"a":1}`}); w.Code != 201 {
		t.Fatalf("the key was claimed by a refused body: %d %s", w.Code, w.Body)
	}
}

// Many members: the first ones are named, a difference beyond them is "the
// body", and the record's parts stay bounded.
func TestBodyFingerprintBoundedParts(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&b, `"m%03d":%d,`, i, i)
	}
	long := strings.Repeat("x", 300)
	doc := func(last int, longValue int) string {
		return b.String() + fmt.Sprintf(`"m999":%d,"%s":%d}`, last, long, longValue)
	}
	h := newHandler(t, newMem(t), bodyFingerprint(t, fingerprint.JSON)).Wrap(&counter{})
	serve(h, req{Key: "k", Body: doc(1, 1)})
	for _, c := range []struct {
		body, want string
	}{{doc(2, 1), "the body"}, {doc(1, 2), "the body"}} {
		w := serve(h, req{Key: "k", Body: c.body})
		if d := problemDetail(t, w.Body.Bytes()); w.Code != 422 || !strings.Contains(d, c.want) || strings.Contains(d, "/m0") {
			t.Fatalf("%d %q", w.Code, d)
		}
	}
	if w := serve(h, req{Key: "k", Body: strings.Replace(doc(1, 1), `"m000":0`, `"m000":5`, 1)}); !strings.Contains(problemDetail(t, w.Body.Bytes()), "/m000") {
		t.Fatalf("a kept member not named: %s", w.Body)
	}
}

func TestBodyFingerprintSettings(t *testing.T) {
	bf, _ := fingerprint.NewJSON()
	v, err := webhook.New(webhook.Webhook{Preset: "standard", Secrets: []string{"whsec_c2VjcmV0LW9mLWVub3VnaC1sZW5ndGgtMTIzNDU2"}, Tolerance: webhook.DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]middleware.Option{
		"with a verifier": func(s *middleware.Settings) { s.BodyFingerprint, s.Verifier = bf, v },
		"with a function": func(s *middleware.Settings) {
			s.BodyFingerprint = bf
			s.FingerprintFunc = func(*http.Request, []byte) string { return "" }
		},
	} {
		_, err := middleware.New(newMem(t), opt)
		var se *cache.FieldError
		if !errors.As(err, &se) || se.Field != "fingerprint" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A record stored by an earlier version (the bytes fingerprint: a SHA-256 of
// the length-prefixed method and path, then the body, written here from its
// definition) still replays: the default reading did not change.
func TestBytesFingerprintReadsEarlierRecords(t *testing.T) {
	store := newMem(t)
	cnt := &counter{}
	h := newHandler(t, store)
	ctx := context.Background()
	r := req{Key: "old", Body: `{"a":1}`}.Build()
	var pre []byte
	for _, f := range []string{"POST", "/charge"} {
		pre = binary.BigEndian.AppendUint64(pre, uint64(len(f)))
		pre = append(pre, f...)
	}
	sum := sha256.Sum256(append(pre, `{"a":1}`...))
	key := h.StoreKey(r, "old")
	if _, _, err := store.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: string(sum[:]), Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	rec := &cache.Record{Version: cache.FormatVersion, State: cache.StateCompleted, Fingerprint: string(sum[:]),
		CreatedAt: time.Now(), Response: &cache.Response{Status: 201, Body: []byte("stored earlier")}}
	if err := store.Complete(ctx, key, "t", rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	w := serve(h.Wrap(cnt), req{Key: "old", Body: `{"a":1}`})
	if w.Code != 201 || w.Body.String() != "stored earlier" || cnt.Calls.Load() != 0 {
		t.Fatalf("earlier record: %d %q, %d calls", w.Code, w.Body, cnt.Calls.Load())
	}
	if w := serve(h.Wrap(cnt), req{Key: "old", Body: `{"a": 1}`}); w.Code != 422 {
		t.Fatalf("bytes reading replayed another body: %d", w.Code)
	}
}

func TestParseKey(t *testing.T) {
	ok := map[string]string{
		"abc":                                  "abc",
		"8e03978e-40d5-43e8-bc93-6894a57f9324": "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`"abc"`:                                "abc",
		`"a b, c"`:                             "a b, c",
		`"q\"uote\\"`:                          `q"uote\`,
		"x;y=1":                                "x;y=1",
		strings.Repeat("a", 255):               strings.Repeat("a", 255),
		`"` + strings.Repeat("a", 255) + `"`:   strings.Repeat("a", 255),
	}
	for in, want := range ok {
		got, err := middleware.ParseKey([]string{in})
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", `""`, "a b", "a,b", "é", "\x00", strings.Repeat("a", 256), `"` + strings.Repeat("a", 256) + `"`,
		`"abc`, `"a"b`, `"a\x"`, "\"a\tb\"", `"a";p`, `"a", "b"`}
	for _, in := range bad {
		if got, err := middleware.ParseKey([]string{in}); err == nil {
			t.Errorf("ParseKey(%q) = %q, want an error", in, got)
		}
	}
	if _, err := middleware.ParseKey(nil); err == nil {
		t.Error("no value accepted")
	}
	if _, err := middleware.ParseKey([]string{"a", "a"}); err == nil {
		t.Error("two values accepted")
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", `""`, "a,b", `"a";x`, "\xff", strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := middleware.ParseKey([]string{v})
		if err != nil {
			return
		}
		if len(key) < 1 || len(key) > middleware.MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d out of 1..255", v, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x is not printable ASCII", v, key, key[i])
			}
		}
		if v[0] != '"' && key != v {
			t.Fatalf("bare value %q parsed to %q", v, key)
		}
	})
}
