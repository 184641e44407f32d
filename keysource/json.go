package keysource

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemproxy/idemproxy/middleware"
)

// maxJSONDepth is encoding/json's nesting limit: a deeper document is not JSON
// to a Go upstream, so it carries no key here either.
const maxJSONDepth = 10000

// errKeyAmbiguous: a member name on the key's pointer appears more than once in
// its object.
var errKeyAmbiguous = errors.New("the key is ambiguous")

// pathLevel is the scanner's state for one token of the pointer: the container
// the token selects from, once it is reached.
type pathLevel struct {
	matches int  // objects: members whose name folds to the token (fold.Rune)
	found   bool // the member named exactly the token, or the element at index, was seen
	index   int  // arrays: the token as an index, -1 when it is not one
	next    int  // arrays: the index of the next element
}

// jsonKey returns the key at the pointer ptr (its tokens, unescaped; spelled
// name) in the JSON document body, in one pass over it that allocates nothing
// but the key: other values are skipped, only the key and the member names
// compared with the pointer's tokens are decoded.
//
// A document that is not JSON to encoding/json (including one nested deeper
// than its 10000 levels) anywhere, even after the key, has no key (middleware.ErrNoKey),
// as has one where the pointer leads nowhere or to something other than a
// string. A member name on the pointer's path that appears more than once in its
// object, compared exactly or as readers that ignore case compare names
// (fold.Rune: Go's encoding/json into a struct, the Kelvin sign a k; .NET and
// Java, ı an i), is errKeyAmbiguous: a Go upstream decoding into a struct takes
// the last such member, other parsers the first. Otherwise the key is what json.Unmarshal
// decodes there, checked by checkBodyKey.
func jsonKey(body []byte, ptr []string, name string) (string, error) {
	var kinds [maxJSONDepth/64 + 1]uint64 // bit set: the container at that depth is an object
	var levelsArr [8]pathLevel
	levels := levelsArr[:0]
	if len(ptr) > len(levelsArr) {
		levels = make([]pathLevel, 0, len(ptr))
	}
	levels = levels[:len(ptr)]
	depth := 0     // containers open
	path := 0      // the first path containers open are on the pointer's path
	reached := 0   // path containers entered, ever
	onPath := true // the next value is the one the pointer selects at its level (the root is)
	target := 0    // 0: not seen, 1: a string (key, keyErr), 2: something else
	var key string
	var keyErr error

	n := len(body)
	i := skipSpace(body, 0)
	for {
		// A value starts at i.
		if i >= n {
			return "", middleware.ErrNoKey
		}
		isTarget := onPath && depth == len(ptr)
		enters := onPath && depth < len(ptr)
		onPath = false
		c := body[i]
		switch c {
		case '{', '[':
			if isTarget {
				target = 2
			}
			if depth == maxJSONDepth {
				return "", middleware.ErrNoKey
			}
			if c == '{' {
				kinds[depth/64] |= 1 << (depth % 64)
			} else {
				kinds[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			if enters {
				path, reached = depth, depth
				levels[depth-1] = pathLevel{index: -1}
				if c == '[' {
					levels[depth-1].index = arrayIndex(ptr[depth-1])
				}
			}
			i = skipSpace(body, i+1)
			if i >= n {
				return "", middleware.ErrNoKey
			}
			if c == '{' {
				if body[i] == '}' {
					i++
					depth, path = pop(depth, path)
					break
				}
				var ok bool
				if i, onPath, ok = member(body, i, depth, path, ptr, levels); !ok {
					return "", middleware.ErrNoKey
				}
				continue
			}
			if body[i] == ']' {
				i++
				depth, path = pop(depth, path)
				break
			}
			onPath = element(depth, path, levels)
			continue
		case '"':
			end, ok := scanString(body, i)
			if !ok {
				return "", middleware.ErrNoKey
			}
			if isTarget {
				target = 1
				key, keyErr = decodeKey(body[i+1 : end-1])
			}
			i = end
		case 't', 'f', 'n':
			lit := "null"
			if c == 't' {
				lit = "true"
			} else if c == 'f' {
				lit = "false"
			}
			if n-i < len(lit) || string(body[i:i+len(lit)]) != lit {
				return "", middleware.ErrNoKey
			}
			if isTarget {
				target = 2
			}
			i += len(lit)
		default:
			end, ok := scanNumber(body, i)
			if !ok {
				return "", middleware.ErrNoKey
			}
			if isTarget {
				target = 2
			}
			i = end
		}
		// After a value: close containers, or move to the next member or element.
		for {
			i = skipSpace(body, i)
			if depth == 0 {
				if i != n {
					return "", middleware.ErrNoKey // text after the document
				}
				return jsonResult(ptr, name, levels, reached, target, key, keyErr)
			}
			if i >= n {
				return "", middleware.ErrNoKey
			}
			object := kinds[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			switch {
			case body[i] == ',' && object:
				var ok bool
				if i, onPath, ok = member(body, skipSpace(body, i+1), depth, path, ptr, levels); !ok {
					return "", middleware.ErrNoKey
				}
			case body[i] == ',':
				i++
				onPath = element(depth, path, levels)
			case body[i] == '}' && object, body[i] == ']' && !object:
				i++
				depth, path = pop(depth, path)
				continue
			default:
				return "", middleware.ErrNoKey
			}
			break
		}
	}
}

// jsonResult decides, once the whole document was found valid, what the
// pointer leads to: level by level, a container reached, one member (or
// element) for the token, and at the end a string.
func jsonResult(ptr []string, name string, levels []pathLevel, reached, target int, key string, keyErr error) (string, error) {
	for l := range ptr {
		if l >= reached {
			return "", middleware.ErrNoKey
		}
		if levels[l].matches > 1 {
			at := "the document"
			if l > 0 {
				at = pointerPrefix(name, l)
			}
			return "", fmt.Errorf("%w: the member %q of %s appears more than once (names compared as Go decodes into structs, case-insensitively)",
				errKeyAmbiguous, ptr[l], at)
		}
		if !levels[l].found {
			return "", middleware.ErrNoKey
		}
	}
	if target != 1 {
		return "", middleware.ErrNoKey
	}
	return key, keyErr
}

// pointerPrefix is the pointer spelled name cut to its first l tokens.
func pointerPrefix(name string, l int) string {
	end := 0
	for range l {
		j := strings.IndexByte(name[end+1:], '/')
		if j < 0 {
			return name
		}
		end += 1 + j
	}
	return name[:end]
}

// pop closes the innermost container.
func pop(depth, path int) (int, int) {
	depth--
	return depth, min(path, depth)
}

// member reads an object member's name at i (its value follows) and reports
// whether its value is the one the pointer selects. A name is decoded only in a
// container on the pointer's path, to compare it with the token.
func member(body []byte, i, depth, path int, ptr []string, levels []pathLevel) (int, bool, bool) {
	if i >= len(body) || body[i] != '"' {
		return i, false, false
	}
	end, ok := scanString(body, i)
	if !ok {
		return i, false, false
	}
	selected := false
	if path == depth {
		lv := &levels[depth-1]
		exact, folded := compareName(body[i+1:end-1], ptr[depth-1])
		if folded {
			lv.matches++
		}
		if exact && !lv.found {
			lv.found, selected = true, true
		}
	}
	i = skipSpace(body, end)
	if i >= len(body) || body[i] != ':' {
		return i, false, false
	}
	return skipSpace(body, i+1), selected, true
}

// element counts an array element that starts now and reports whether it is
// the one the pointer selects.
func element(depth, path int, levels []pathLevel) bool {
	if path != depth {
		return false
	}
	lv := &levels[depth-1]
	selected := lv.next == lv.index
	if selected {
		lv.found = true
	}
	lv.next++
	return selected
}

// arrayIndex is tok as an RFC 6901 array index (0, or digits without a leading
// zero), or -1.
func arrayIndex(tok string) int {
	if tok == "" || len(tok) > 18 || len(tok) > 1 && tok[0] == '0' {
		return -1
	}
	i := 0
	for j := 0; j < len(tok); j++ {
		if tok[j] < '0' || tok[j] > '9' {
			return -1
		}
		i = i*10 + int(tok[j]-'0')
	}
	return i
}
