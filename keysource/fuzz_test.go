package keysource

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/idemproxy/idemproxy/middleware"
)

// fullDecodeKey is the key at ptr as encoding/json's own decoder finds it: the
// document checked with json.Valid, then walked with a json.Decoder that keeps
// every member (duplicates included) in order, names compared for the
// ambiguity rule with bytes.EqualFold after each rune is taken to the lower case
// of its upper case (Go's struct match, .NET's and Java's case-insensitivity).
func fullDecodeKey(body []byte, ptr []string) (string, error) {
	if !json.Valid(body) {
		return "", middleware.ErrNoKey
	}
	val := json.RawMessage(body)
	for _, tok := range ptr {
		dec := json.NewDecoder(bytes.NewReader(val))
		open, err := dec.Token()
		if err != nil {
			return "", errors.New("oracle: " + err.Error())
		}
		var next json.RawMessage
		found, matches := false, 0
		switch open {
		case json.Delim('{'):
			for dec.More() {
				nt, err := dec.Token()
				if err != nil {
					return "", errors.New("oracle: " + err.Error())
				}
				name := nt.(string)
				if bytes.EqualFold(lowerUpper(name), lowerUpper(tok)) {
					matches++
				}
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					return "", errors.New("oracle: " + err.Error())
				}
				if name == tok && !found {
					found, next = true, v
				}
			}
			if matches > 1 {
				return "", errKeyAmbiguous
			}
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					return "", errors.New("oracle: " + err.Error())
				}
				if json.Valid([]byte(tok)) && string(must(json.Marshal(i))) == tok && !found {
					found, next = true, v
				}
			}
		}
		if !found {
			return "", middleware.ErrNoKey
		}
		val = next
	}
	var s string
	if json.Unmarshal(val, &s) != nil {
		return "", middleware.ErrNoKey
	}
	return s, checkBodyKey(s)
}

func lowerUpper(s string) []byte {
	return []byte(strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, s))
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The key at a JSON pointer is what a full decode finds there whenever the
// document is valid and has no duplicate names on the path; an invalid document
// has no key; a duplicate name on the path is the ambiguity error; no body
// panics.
func FuzzJSONPointerKey(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1"}`), "/id")
	f.Add([]byte(`{"a":{"b":["x","y"]}}`), "/a/b/1")
	f.Add([]byte(`{"a/b":{"~":"k"}}`), "/a~1b/~0")
	f.Add([]byte(`[1,{"id":2}]`), "/1/id")
	f.Add([]byte(`{"id":"a","id":"b"}`), "/id")
	f.Add([]byte(`{"id":"a","ID":"b"}`), "/id")
	f.Add([]byte(`{"key":"a","\u212aey":"b"}`), "/key")
	f.Add([]byte(`{"id":"a","\u0131d":"b","\u0130D":"c"}`), "/id")
	f.Add([]byte(`{"d":{"id":"\ud83d\ude00\ud800x\u00e9\"\\\/\b\f\n\r\t"}}`), "/d/id")
	f.Add([]byte("{\"id\":\"\xff\xfe\xed\xa0\x80\"}"), "/id")
	f.Add([]byte(`{"a":[[],{},-0.5e+7,true,false,null,"s"],"id":"k"} `), "/id")
	f.Add([]byte(`{"id":"k"} {}`), "/id")
	f.Add([]byte(strings.Repeat("[", 10001)+strings.Repeat("]", 10001)), "/0")
	f.Add([]byte(`{"":{"0":"k"}}`), "//0")
	f.Add([]byte(`["a","b"]`), "/01")
	f.Fuzz(func(t *testing.T, body []byte, pointer string) {
		ptr, err := parsePointer(pointer)
		if err != nil {
			return
		}
		got, gotErr := jsonKey(body, ptr, pointer)
		want, wantErr := fullDecodeKey(body, ptr)
		if wantErr != nil && strings.HasPrefix(wantErr.Error(), "oracle: ") {
			t.Fatalf("%q: the oracle failed on a valid document: %v", body, wantErr)
		}
		if !errors.Is(gotErr, wantErr) && !(gotErr == nil && wantErr == nil) || gotErr == nil && got != want {
			t.Fatalf("%q at %s: got %q, %v; a full decode finds %q, %v", body, pointer, got, gotErr, want, wantErr)
		}
	})
}

// The form source agrees with url.ParseQuery on every body ParseQuery accepts:
// no field is no key, one is the key, two is errKeyFieldTwo. Of those it
// refuses, one with ";" is ambiguous, one with a bad escape has no key. No body
// panics.
func FuzzFormKey(f *testing.F) {
	f.Add([]byte("amount=5&idempotency_key=f-1"), "idempotency_key")
	f.Add([]byte("k=a&k=b"), "k")
	f.Add([]byte("k=a;k=b"), "k")
	f.Add([]byte("k%5F=a&k_=b+c%20d"), "k_")
	f.Add([]byte("a+b=%41%zz"), "a b")
	f.Add([]byte("&&=&k&k=&"), "k")
	f.Add([]byte("k="+strings.Repeat("%41", 300)), "k")
	f.Add([]byte("k=%00"), "k")
	f.Fuzz(func(t *testing.T, body []byte, field string) {
		if field == "" {
			return // form: takes a name
		}
		got, err := formKey(body, field)
		q, perr := url.ParseQuery(string(body))
		if perr != nil {
			switch {
			case bytes.IndexByte(body, ';') >= 0:
				if err != errFormSemicolon {
					t.Fatalf("%q: %q, %v; want the semicolon ambiguity", body, got, err)
				}
			case bytes.Count(body, []byte{'&'}) < 10000 && err != middleware.ErrNoKey:
				t.Fatalf("%q (ParseQuery: %v): %q, %v; want no key", body, perr, got, err)
			}
			return
		}
		var want string
		var wantErr error
		switch vals := q[field]; len(vals) {
		case 0:
			wantErr = middleware.ErrNoKey
		case 1:
			want, wantErr = vals[0], checkBodyKey(vals[0])
		default:
			wantErr = errKeyFieldTwo
		}
		if err != wantErr || err == nil && got != want {
			t.Fatalf("%q field %q: got %q, %v; ParseQuery finds %q, %v", body, field, got, err, want, wantErr)
		}
	})
}
