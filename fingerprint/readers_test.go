package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// Readers of bodies as upstreams read them, written here independently of the
// package: a canonical fingerprint must never give one fingerprint to two
// bodies that one of them reads differently.

// lowerUpper is s with each rune the lower case of its upper case.
func lowerUpper(s string) []byte {
	return []byte(strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, s))
}

// foldsAlike reports whether a reader that ignores case may take a and b for
// one name: Go (bytes.EqualFold), .NET (by upper case), Java (by the lower case
// of the upper case).
func foldsAlike(a, b string) bool { return bytes.EqualFold(lowerUpper(a), lowerUpper(b)) }

// foldedNames reports whether some object of the valid JSON document doc has
// two member names that fold alike.
func foldedNames(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type level struct {
		object bool
		names  []string
		name   bool // the next string token is a member name
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.name {
			for _, n := range top.names {
				if n != s && foldsAlike(n, s) {
					return true
				}
			}
			top.names = append(top.names, s)
			top.name = false
			continue
		}
		if top != nil && top.object {
			top.name = true // a value ended (or a container opens: it is marked when it closes)
		}
		switch tok {
		case json.Delim('{'):
			if top != nil && top.object {
				top.name = false
			}
			stack = append(stack, &level{object: true, name: true})
		case json.Delim('['):
			if top != nil && top.object {
				top.name = false
			}
			stack = append(stack, &level{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].name = true
			}
		}
	}
}

// probe is decoded as Go's encoding/json decodes into a struct: member names
// matched to fields case-insensitively, the last match winning.
type probe struct {
	A      any     `json:"a"`
	K      any     `json:"k"`
	S      any     `json:"s"`
	I      any     `json:"i"`
	Amount any     `json:"amount"`
	Meta   *probe  `json:"meta"`
	Items  []probe `json:"items"`
}

// structReading is doc decoded into a probe (and whether that failed).
func structReading(doc []byte) string {
	var p probe
	err := json.Unmarshal(doc, &p)
	out, _ := json.Marshal(p)
	return fmt.Sprintf("%s %v", out, err != nil)
}

// formPair is one decoded field; bare is a name without "=".
type formPair struct {
	name, value string
	bare        bool
}

func formPairs(body string) []formPair {
	var out []formPair
	for _, p := range strings.Split(body, "&") {
		if p == "" {
			continue
		}
		n, v, has := strings.Cut(p, "=")
		n, _ = url.QueryUnescape(n)
		v, _ = url.QueryUnescape(v)
		out = append(out, formPair{n, v, !has})
	}
	return out
}

// formReaders read a form as upstreams do; each result is compared with
// reflect.DeepEqual. The top level is a map: which variable came first is not
// part of a reading (the form fingerprint sorts fields by name).
var formReaders = map[string]func([]formPair) any{
	"Go url.Values": func(ps []formPair) any {
		m := map[string][]string{}
		for _, p := range ps {
			m[p.name] = append(m[p.name], p.value)
		}
		return m
	},
	"case-insensitive, last wins (ASP.NET Core binding one value)": func(ps []formPair) any {
		m := map[string]string{}
		for _, p := range ps {
			m[string(bytes.ToUpper(lowerUpper(p.name)))] = p.value
		}
		return m
	},
	"case-insensitive, first wins": func(ps []formPair) any {
		m := map[string]string{}
		for _, p := range ps {
			k := string(bytes.ToUpper(lowerUpper(p.name)))
			if _, ok := m[k]; !ok {
				m[k] = p.value
			}
		}
		return m
	},
	"case-insensitive Go folding, in order (gorilla/schema, a slice)": func(ps []formPair) any {
		m := map[string][]string{}
		for _, p := range ps {
			k := string(bytes.ToUpper([]byte(p.name)))
			k = strings.Map(func(r rune) rune {
				for s := unicode.SimpleFold(r); s != r; s = unicode.SimpleFold(s) {
					r = min(r, s)
				}
				return r
			}, k)
			m[k] = append(m[k], p.value)
		}
		return m
	},
	"PHP $_POST": phpRead,
	"Rack":       rackRead,
}

// phpArray is a PHP array: ordered keys, and the next index an append takes.
type phpArray struct {
	keys []string
	vals map[string]any
	next int
}

func newPHPArray() *phpArray { return &phpArray{vals: map[string]any{}} }

func (a *phpArray) set(k string, v any) {
	if _, ok := a.vals[k]; !ok {
		a.keys = append(a.keys, k)
	}
	a.vals[k] = v
	if n, err := strconv.Atoi(k); err == nil && strconv.Itoa(n) == k && n >= a.next {
		a.next = n + 1
	}
}

func (a *phpArray) del(k string) {
	if _, ok := a.vals[k]; ok {
		delete(a.vals, k)
		for i, x := range a.keys {
			if x == k {
				a.keys = append(a.keys[:i], a.keys[i+1:]...)
				break
			}
		}
	}
}

// child is the array at a[k] (nil k: a new element), made one if it is not.
func (a *phpArray) child(k *string) *phpArray {
	if k == nil {
		c := newPHPArray()
		a.set(strconv.Itoa(a.next), c)
		return c
	}
	if c, ok := a.vals[*k].(*phpArray); ok {
		return c
	}
	c := newPHPArray()
	a.set(*k, c)
	return c
}

// plain is the array as nested ordered pairs.
func (a *phpArray) plain() any {
	out := make([][2]any, 0, len(a.keys))
	for _, k := range a.keys {
		v := a.vals[k]
		if c, ok := v.(*phpArray); ok {
			v = c.plain()
		}
		out = append(out, [2]any{k, v})
	}
	return out
}

func phpSpace(c byte) bool { return strings.IndexByte(" \t\n\v\f\r", c) >= 0 }

// phpRead follows php_register_variable_ex (main/php_variables.c).
func phpRead(ps []formPair) any {
	top := newPHPArray()
	for _, p := range ps {
		name := strings.TrimLeft(p.name, " ")
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b := []byte(name)
		isArray, ip := false, 0
		var p0 int
		for p0 = 0; p0 < len(b); p0++ {
			if b[p0] == ' ' || b[p0] == '.' {
				b[p0] = '_'
			} else if b[p0] == '[' {
				isArray, ip = true, p0
				break
			}
		}
		if p0 == 0 {
			continue
		}
		varName := string(b[:p0])
		index := &varName
		cur := top
		if isArray {
			nest := 0
			for {
				nest++
				if nest > 64 {
					top.del(varName)
					index = nil
					cur = nil
					break
				}
				ip++
				idxStart := ip
				if ip < len(b) && phpSpace(b[ip]) {
					ip++
				}
				var idx *string
				if !(ip < len(b) && b[ip] == ']') {
					end := bytes.IndexByte(b[ip:], ']')
					if end < 0 {
						if nest == 1 {
							rest := b[idxStart:]
							for i := range rest {
								if rest[i] == ' ' || rest[i] == '.' || rest[i] == '[' {
									rest[i] = '_'
								}
							}
							s := varName + "_" + string(rest)
							index = &s
						}
						break
					}
					s := string(b[idxStart : ip+end])
					idx = &s
					ip += end
				}
				cur = cur.child(index)
				index = idx
				ip++
				if !(ip < len(b) && b[ip] == '[') {
					break
				}
			}
		}
		if cur == nil {
			continue
		}
		if index == nil {
			cur.set(strconv.Itoa(cur.next), p.value)
		} else {
			cur.set(*index, p.value)
		}
	}
	m := map[string]any{}
	for _, k := range top.keys {
		v := top.vals[k]
		if c, ok := v.(*phpArray); ok {
			v = c.plain()
		}
		m[k] = v
	}
	return m
}

// rackHash is a Ruby hash: ordered keys.
type rackHash struct {
	keys []string
	vals map[string]any
}

func newRackHash() *rackHash { return &rackHash{vals: map[string]any{}} }

func (h *rackHash) set(k string, v any) {
	if _, ok := h.vals[k]; !ok {
		h.keys = append(h.keys, k)
	}
	h.vals[k] = v
}

type rackError struct{}

// rackRead follows Rack::QueryParser#parse_nested_query (Rack 3): a type
// conflict is an error for the whole body.
func rackRead(ps []formPair) (out any) {
	defer func() {
		if recover() != nil {
			out = "error"
		}
	}()
	params := newRackHash()
	for _, p := range ps {
		var v any = p.value
		if p.bare {
			v = nil
		}
		rackNormalize(params, p.name, v, 0)
	}
	m := map[string]any{}
	for _, k := range params.keys {
		m[k] = rackPlain(params.vals[k])
	}
	return m
}

func rackPlain(v any) any {
	switch x := v.(type) {
	case *rackHash:
		out := [][2]any{}
		for _, k := range x.keys {
			out = append(out, [2]any{k, rackPlain(x.vals[k])})
		}
		return out
	case *[]any:
		out := []any{}
		for _, e := range *x {
			out = append(out, rackPlain(e))
		}
		return out
	}
	return v
}

func rackHasKey(h *rackHash, key string) bool {
	if strings.Contains(key, "[]") {
		return false
	}
	var cur any = h
	for _, part := range strings.FieldsFunc(key, func(r rune) bool { return r == '[' || r == ']' }) {
		hh, ok := cur.(*rackHash)
		if !ok {
			return false
		}
		if cur, ok = hh.vals[part]; !ok {
			return false
		}
	}
	return true
}

func rackNormalize(params *rackHash, name string, v any, depth int) any {
	if depth >= 32 {
		panic(rackError{})
	}
	var k, after string
	switch {
	case depth == 0:
		if i := strings.IndexByte(name[min(1, len(name)):], '['); i >= 0 && len(name) > 0 {
			k, after = name[:1+i], name[1+i:]
		} else {
			k = name
		}
	case strings.HasPrefix(name, "[]"):
		k, after = "[]", name[2:]
	case strings.HasPrefix(name, "[") && strings.IndexByte(name[1:], ']') >= 0:
		i := 1 + strings.IndexByte(name[1:], ']')
		k, after = name[1:i], name[i+1:]
	default:
		k = name
	}
	if k == "" {
		return nil // Ruby's bare return: the caller stores nil
	}
	switch {
	case after == "":
		if k == "[]" && depth != 0 {
			return &[]any{v}
		}
		params.set(k, v)
	case after == "[":
		params.set(name, v)
	case after == "[]":
		arr := rackArray(params, k)
		*arr = append(*arr, v)
	case strings.HasPrefix(after, "[]"):
		child := ""
		if len(after) > 3 && after[2] == '[' && strings.HasSuffix(after, "]") {
			child = after[3 : len(after)-1]
		}
		if child == "" || strings.ContainsAny(child, "[]") {
			child = after[2:]
		}
		arr := rackArray(params, k)
		if n := len(*arr); n > 0 {
			if last, ok := (*arr)[n-1].(*rackHash); ok && !rackHasKey(last, child) {
				rackNormalize(last, child, v, depth+1)
				return params
			}
		}
		*arr = append(*arr, rackNormalize(newRackHash(), child, v, depth+1))
	default:
		h, ok := params.vals[k]
		if !ok || h == nil {
			h = newRackHash()
			params.set(k, h)
		}
		hh, ok := h.(*rackHash)
		if !ok {
			panic(rackError{})
		}
		params.set(k, rackNormalize(hh, after, v, depth+1))
	}
	return params
}

func rackArray(params *rackHash, k string) *[]any {
	v, ok := params.vals[k]
	if !ok || v == nil {
		arr := &[]any{}
		params.set(k, arr)
		return arr
	}
	arr, ok := v.(*[]any)
	if !ok {
		panic(rackError{})
	}
	return arr
}

// formReadingsDiffer names a reader that reads a and b differently, or "".
func formReadingsDiffer(a, b string) string {
	pa, pb := formPairs(a), formPairs(b)
	for name, read := range formReaders {
		if !reflect.DeepEqual(read(pa), read(pb)) {
			return name
		}
	}
	return ""
}
