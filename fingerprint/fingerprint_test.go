package fingerprint_test

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/fingerprint"
	"github.com/idemproxy/idemproxy/middleware"
)

// digestOf combines a body's parts as the core does: equal digests mean the
// same body. names lists the parts' names.
func digestOf(t testing.TB, bf middleware.BodyFingerprint, ct string, body string) (sum string, names []string, err error) {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	if ct != "" {
		r.Header.Set("Content-Type", ct)
	}
	h := sha256.New()
	err = bf.Parts(r, []byte(body), func(name string, s [sha256.Size]byte) {
		fmt.Fprintf(h, "%d:%s%x;", len(name), name, s)
		names = append(names, name)
	})
	return fmt.Sprintf("%x", h.Sum(nil)), names, err
}

type pair struct {
	name  string
	a, b  string
	equal bool
}

func runPairs(t *testing.T, bf middleware.BodyFingerprint, ctA, ctB string, pairs []pair) {
	t.Helper()
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			da, _, err := digestOf(t, bf, ctA, p.a)
			if err != nil {
				t.Fatalf("%q: %v", p.a, err)
			}
			db, _, err := digestOf(t, bf, ctB, p.b)
			if err != nil {
				t.Fatalf("%q: %v", p.b, err)
			}
			if (da == db) != p.equal {
				t.Fatalf("%q and %q: equal = %v, want %v", p.a, p.b, da == db, p.equal)
			}
		})
	}
}

func TestJSONEqualAndUnequal(t *testing.T) {
	bf, err := fingerprint.NewJSON("/request_time", "/meta/sent_at", "/items/1")
	if err != nil {
		t.Fatal(err)
	}
	runPairs(t, bf, "", "", []pair{
		{"key order", `{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{"nested key order", `{"o":{"x":[1,{"p":1,"q":2}],"y":null}}`, `{"o":{"y":null,"x":[1,{"q":2,"p":1}]}}`, true},
		{"whitespace", `{"a":[1,2],"b":"c"}`, " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\":\"c\" } \n", true},
		{"1.0 is 1", `{"n":1}`, `{"n":1.0}`, true},
		{"exponent forms", `{"n":100}`, `{"n":1E2}`, true},
		{"exponent with sign", `{"n":0.002}`, `{"n":2e-3}`, true},
		{"trailing zeros", `{"n":4.5}`, `{"n":4.50}`, true},
		{"-0 is 0", `{"n":0}`, `{"n":-0.0}`, true},
		{"unicode escape", `{"s":"é€😀"}`, `{"s":"\u00e9\u20AC\ud83d\ude00"}`, true},
		{"escaped name", `{"é":1}`, `{"\u00e9":1}`, true},
		{"solidus escape", `{"s":"a/b"}`, `{"s":"a\/b"}`, true},
		{"excluded member differs", `{"a":1,"request_time":"2024-01-01"}`, `{"a":1,"request_time":"2025-12-31"}`, true},
		{"excluded member absent", `{"a":1,"request_time":5}`, `{"a":1}`, true},
		{"excluded nested member", `{"meta":{"sent_at":1,"id":"x"}}`, `{"meta":{"id":"x","sent_at":[2]}}`, true},
		{"excluded array element", `{"items":[1,2,3]}`, `{"items":[1,{"x":9},3]}`, true},

		{"value differs", `{"a":1}`, `{"a":2}`, false},
		{"string is not a number", `{"a":1}`, `{"a":"1"}`, false},
		{"true is not \"true\"", `{"a":true}`, `{"a":"true"}`, false},
		{"null is not absent", `{"a":1,"b":null}`, `{"a":1}`, false},
		{"member added", `{"a":1}`, `{"a":1,"c":0}`, false},
		{"array order", `{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{"nested value", `{"o":{"x":[1,{"p":1}]}}`, `{"o":{"x":[1,{"p":2}]}}`, false},
		{"excluded name elsewhere counts", `{"x":{"request_time":1}}`, `{"x":{"request_time":2}}`, false},
		{"excluded element: length still counts", `{"items":[1,2]}`, `{"items":[1]}`, false},
		{"element next to the excluded one", `{"items":[1,2,3]}`, `{"items":[1,2,4]}`, false},
		{"meta sibling counts", `{"meta":{"sent_at":1,"id":"x"}}`, `{"meta":{"sent_at":1,"id":"y"}}`, false},
		{"object is not array", `{}`, `[]`, false},
		{"empty is not {}", ``, `{}`, false},
		{"empty is not null", ``, `null`, false},
		{"case of a name", `{"a":1}`, `{"A":1}`, false},
		{"member name with a slash is not a nested pointer", `{"a/b":1}`, `{"a":{"b":1}}`, false},
		{"large but exact numbers", `{"n":9007199254740992}`, `{"n":9007199254740990}`, false},
		{"unicode normalisation is not applied", `{"s":"é"}`, `{"s":"e\u0301"}`, false},
		{"scalar roots", `1`, `2`, false},
		{"whitespace in a string counts", `{"s":"a b"}`, `{"s":"a  b"}`, false},
	})
}

func TestJSONRefused(t *testing.T) {
	bf, _ := fingerprint.NewJSON()
	deep := strings.Repeat("[", fingerprint.MaxDepth+1) + strings.Repeat("]", fingerprint.MaxDepth+1)
	many := "[" + strings.Repeat("0,", fingerprint.MaxValues) + "0]"
	for _, c := range []struct{ name, body, want string }{
		{"duplicate name", `{"a":1,"a":1}`, "twice"},
		{"duplicate after unescaping", `{"a":1,"\u0061":2}`, "twice"},
		{"nested duplicate", `{"o":{"b":1,"b":2}}`, `at "/o/b"`},
		{"integer beyond a double", `{"n":9007199254740993}`, "does not hold exactly"},
		{"more digits than a double", `{"n":0.10000000000000001}`, "does not hold exactly"},
		{"RFC 8785's own inexact example", `[333333333.33333329]`, "does not hold exactly"},
		{"underflow", `[1e-400]`, "does not hold exactly"},
		{"overflow", `[1e400]`, "range"},
		{"huge exponent", `[1e99999999999999999999]`, "range"},
		{"long number", `[` + strings.Repeat("1", 500) + `]`, "longer"},
		{"lone high surrogate", `["\ud800"]`, "surrogate"},
		{"lone low surrogate", `["\udc00x"]`, "surrogate"},
		{"reversed pair", `["\udc00\ud800"]`, "surrogate"},
		{"invalid UTF-8", "[\"\xff\"]", "UTF-8"},
		{"control character", "[\"a\x01\"]", "control"},
		{"too deep", deep, "deeper"},
		{"too many values", many, "more than"},
		{"trailing comma", `{"a":1,}`, ""},
		{"text after", `{"a":1} x`, "after"},
		{"leading zero", `[01]`, ""},
		{"bare point", `[1.]`, "not JSON"},
		{"plus sign", `[+1]`, "not JSON"},
		{"NaN", `[NaN]`, "not JSON"},
		{"single quotes", `{'a':1}`, ""},
		{"unclosed", `{"a":[1,2}`, ""},
		{"bad escape", `["\x41"]`, "escape"},
		{"two documents", `{} {}`, "after"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := digestOf(t, bf, "", c.body)
			if err == nil {
				t.Fatalf("%.60q accepted", c.body)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%.60q: %v, want it to mention %q", c.body, err, c.want)
			}
		})
	}
}

// RFC 8785's examples (§3.2.2, §3.2.3, Appendix B) and ECMAScript's number
// forms.
func TestCanonicalJSONVectors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{
  "numbers": [333333333.3333333, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{`[0, -0, 1e21, 1e20, 1e-6, 1e-7, 123e-20, 5e-324, 1.7976931348623157e308, -1.5, 9007199254740992, 295147905179352830000]`,
			`[0,0,1e+21,100000000000000000000,0.000001,1e-7,1.23e-18,5e-324,1.7976931348623157e+308,-1.5,9007199254740992,295147905179352830000]`},
		{`["\u001f\u007f\u2028\b\f"]`, "[\"\\u001f\u007f\u2028\\b\\f\"]"},
		{` "x" `, `"x"`},
		{`{"aaaaaaaaaaaaaaaaaaé\ufb33":1,"aaaaaaaaaaaaaaaaaaé\ud83d\ude00":2,"aaaaaaaaaaaaaaaaaaé":3,"aaaaaaaaaaaaaaaaaaè":4}`,
			"{\"aaaaaaaaaaaaaaaaaaè\":4,\"aaaaaaaaaaaaaaaaaaé\":3,\"aaaaaaaaaaaaaaaaaaé😀\":2,\"aaaaaaaaaaaaaaaaaaé\ufb33\":1}"},
	} {
		got, err := fingerprint.CanonicalJSON([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("canonical form of %s\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestJSONPartNames(t *testing.T) {
	bf, _ := fingerprint.NewJSON("/skip")
	_, names, err := digestOf(t, bf, "", `{"b":1,"a/~":2,"skip":3}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, " "); got != ` /a~1~0 /b` {
		t.Fatalf("names %q", got)
	}
	_, names, _ = digestOf(t, bf, "", `[1,2]`)
	if got := strings.Join(names, " "); got != ` /0 /1` {
		t.Fatalf("names %q", got)
	}
}

func TestFormEqualAndUnequal(t *testing.T) {
	bf, err := fingerprint.NewForm("/request_time")
	if err != nil {
		t.Fatal(err)
	}
	runPairs(t, bf, "", "", []pair{
		{"field order", "a=1&b=2", "b=2&a=1", true},
		{"repeated fields move together", "a=1&b=2&a=3", "b=2&a=1&a=3", true},
		{"encoding", "name=J%C3%B6rg+X", "name=J%c3%b6rg%20X", true},
		{"encoded name", "na%6De=1", "name=1", true},
		{"empty pairs", "a=1&&b=2&", "a=1&b=2", true},
		{"bare name", "a&b=2", "b=2&a", true},
		{"excluded field", "a=1&request_time=5", "request_time=6&a=1", true},
		{"excluded field absent", "a=1&request_time=5", "a=1", true},

		{"value differs", "a=1", "a=2", false},
		{"repeated values reordered", "a=1&a=3", "a=3&a=1", false},
		{"field repeated", "a=1", "a=1&a=1", false},
		{"plus is a space, %2B a plus", "a=x+y", "a=x%2By", false},
		{"field added", "a=1", "a=1&b=", false},
		{"a bare name is not an empty value", "a&b=2", "a=&b=2", false},
		{"name case", "a=1", "A=1", false},
	})
	for _, bad := range []string{"a=1;b=2", "a=%zz", "a=%4"} {
		if _, _, err := digestOf(t, bf, "", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	_, names, _ := digestOf(t, bf, "", "b=1&a=2&a=3")
	if got := strings.Join(names, ","); got != `form field "a",form field "b"` {
		t.Fatalf("names %q", got)
	}
}

func multipartBody(boundary string, parts ...string) string {
	var b strings.Builder
	b.WriteString("preamble " + boundary + "\r\n")
	for _, p := range parts {
		b.WriteString("--" + boundary + "\r\n" + p + "\r\n")
	}
	b.WriteString("--" + boundary + "--\r\nepilogue")
	return b.String()
}

func TestMultipartEqualAndUnequal(t *testing.T) {
	bf, err := fingerprint.NewMultipart("/request_time")
	if err != nil {
		t.Fatal(err)
	}
	field := func(name, v string) string {
		return "Content-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + v
	}
	file := "Content-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\nworld"
	a := multipartBody("AAA", field("x", "1"), file, field("request_time", "5"))
	ct := func(b string) string { return "multipart/form-data; boundary=" + b }
	for _, c := range []struct {
		name  string
		b     string
		ctB   string
		equal bool
	}{
		{"another boundary", multipartBody("----WebKitFormBoundary7MA4YWxk", field("x", "1"), file, field("request_time", "5")), ct("----WebKitFormBoundary7MA4YWxk"), true},
		{"header case and parameter order", multipartBody("B", field("x", "1"),
			"content-type: TEXT/PLAIN\r\nCONTENT-DISPOSITION: Form-Data; filename=\"a.txt\"; name=f\r\nX-Other: 1\r\n\r\nhello\r\nworld",
			field("request_time", "5")), ct("B"), true},
		{"excluded part differs", multipartBody("B", field("x", "1"), file, field("request_time", "6")), ct("B"), true},
		{"excluded part absent", multipartBody("B", field("x", "1"), file), ct("B"), true},
		{"quoted boundary", multipartBody("B", field("x", "1"), file, field("request_time", "5")), `multipart/form-data; boundary="B"`, true},

		{"value differs", multipartBody("B", field("x", "2"), file, field("request_time", "5")), ct("B"), false},
		{"file bytes differ", multipartBody("B", field("x", "1"), strings.Replace(file, "world", "World", 1)), ct("B"), false},
		{"filename differs", multipartBody("B", field("x", "1"), strings.Replace(file, "a.txt", "b.txt", 1)), ct("B"), false},
		{"part content type differs", multipartBody("B", field("x", "1"), strings.Replace(file, "text/plain", "text/csv", 1)), ct("B"), false},
		{"part order", multipartBody("B", file, field("x", "1")), ct("B"), false},
		{"part added", multipartBody("B", field("x", "1"), file, field("y", "")), ct("B"), false},
		{"multipart/mixed is not form-data", multipartBody("B", field("x", "1"), file), "multipart/mixed; boundary=B", false},
		{"other headers count outside form-data", multipartBody("B", "Content-ID: <a>\r\n\r\nx"), "multipart/related; boundary=B", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			da, _, err := digestOf(t, bf, ct("AAA"), a)
			if err != nil {
				t.Fatal(err)
			}
			db, _, err := digestOf(t, bf, c.ctB, c.b)
			if err != nil {
				t.Fatal(err)
			}
			if (da == db) != c.equal {
				t.Fatalf("equal = %v, want %v", da == db, c.equal)
			}
		})
	}
	for _, bad := range []struct{ ct, body string }{
		{"application/json", a},
		{"multipart/form-data", a},
		{ct("AAA"), strings.TrimSuffix(a, "--\r\nepilogue")},
		{ct("B"), multipartBody("B", "Content-Disposition: form-data; name=a; name=b\r\n\r\nx")},
		{ct("B"), multipartBody("B", "Content-Disposition: form-data; name=a\r\nContent-Disposition: form-data; name=b\r\n\r\nx")},
	} {
		if _, _, err := digestOf(t, bf, bad.ct, bad.body); err == nil {
			t.Errorf("%q with %.40q accepted", bad.ct, bad.body)
		}
	}
	_, names, _ := digestOf(t, bf, ct("AAA"), a)
	if got := strings.Join(names, ","); got != ",multipart part 1,multipart part 2" {
		t.Fatalf("names %q", got)
	}
	related := func(id, extra string) string {
		d, _, err := digestOf(t, bf, "multipart/related; boundary=R", multipartBody("R", "Content-Type: text/plain\r\nContent-ID: "+id+extra+"\r\n\r\nx"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if related("<a>", "") == related("<b>", "") || related("<a>", "") != related(" <a> ", "") || related("<a>", "") == related("<a>", "\r\nX-Other: 1") {
		t.Fatal("multipart/related: every part header counts, trimmed")
	}
}

func TestEncodedBodyRefused(t *testing.T) {
	for _, mode := range []string{fingerprint.JSON, fingerprint.Form, fingerprint.Multipart} {
		bf, _ := fingerprint.Parse(mode, nil)
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Content-Type", "multipart/form-data; boundary=b")
		r.Header.Set("Content-Encoding", "gzip")
		if err := bf.Parts(r, []byte("\x1f\x8b"), func(string, [sha256.Size]byte) {}); err == nil || !strings.Contains(err.Error(), "Content-Encoding") {
			t.Errorf("%s: a gzip body: %v", mode, err)
		}
		r.Header.Set("Content-Encoding", "identity")
		if err := bf.Parts(r, []byte("--b--\r\n"), func(string, [sha256.Size]byte) {}); err != nil && strings.Contains(err.Error(), "Content-Encoding") {
			t.Errorf("%s: identity refused: %v", mode, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		mode   string
		ignore []string
		ok     bool
	}{
		{"bytes", nil, true}, {"", nil, true}, {"json", []string{"/a/b", "/x~1y", "/0"}, true},
		{"form", []string{"/f"}, true}, {"multipart", nil, true},
		{"bytes", []string{"/a"}, false}, {"xml", nil, false}, {"json", []string{"a"}, false},
		{"json", []string{""}, false}, {"json", []string{"/a~2"}, false}, {"form", []string{"/a/b"}, false},
		{"json", make([]string, fingerprint.MaxIgnore+1), false},
	} {
		bf, err := fingerprint.Parse(c.mode, c.ignore)
		if (err == nil) != c.ok {
			t.Errorf("Parse(%q, %q): %v, want ok=%v", c.mode, c.ignore, err, c.ok)
		}
		if err == nil && (c.mode == "bytes" || c.mode == "") != (bf == nil) {
			t.Errorf("Parse(%q): %v", c.mode, bf)
		}
	}
}

// BenchmarkJSONParts reads a 1 MiB document of objects (the cost a json route
// adds per keyed request of that size).
func BenchmarkJSONParts(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i := 0; sb.Len() < 1<<20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"sku":"item-%d","qty":%d,"price":%d.25,"note":"caf\u00e9 n\u00b0%d"}`, i, i%7, i%1000, i)
	}
	sb.WriteString(`],"request_time":"2026-11-25T00:00:00Z"}`)
	body := []byte(sb.String())
	bf, _ := fingerprint.NewJSON("/request_time")
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := bf.Parts(r, body, func(string, [sha256.Size]byte) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONPartsMixedCase is BenchmarkJSONParts with camelCase member
// names (as .NET and Java APIs write them): names with capitals are the ones
// compared as case-insensitive readers compare them.
func BenchmarkJSONPartsMixedCase(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"lineItems":[`)
	for i := 0; sb.Len() < 1<<20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"skuId":"item-%d","quantity":%d,"unitPrice":%d.25,"noteText":"caf\u00e9 n\u00b0%d"}`, i, i%7, i%1000, i)
	}
	sb.WriteString(`],"requestTime":"2026-11-25T00:00:00Z"}`)
	body := []byte(sb.String())
	bf, _ := fingerprint.NewJSON("/requestTime")
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := bf.Parts(r, body, func(string, [sha256.Size]byte) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFormParts reads a 64 KiB form of flat and bracketed fields.
func BenchmarkFormParts(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 64<<10; i++ {
		if i > 0 {
			sb.WriteByte('&')
		}
		fmt.Fprintf(&sb, "item_%d_sku=sku-%d&items%%5B%d%%5D%%5Bqty%%5D=%d&Note.%d=caf%%C3%%A9+%d", i, i, i, i%7, i, i)
	}
	body := []byte(sb.String())
	bf, _ := fingerprint.NewForm()
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := bf.Parts(r, body, func(string, [sha256.Size]byte) {}); err != nil {
			b.Fatal(err)
		}
	}
}
