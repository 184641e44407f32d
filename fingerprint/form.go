package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// FormBody is the form reading (application/x-www-form-urlencoded). Build it
// with NewForm.
type FormBody struct {
	ignore map[string]bool
}

// NewForm returns the form reading that leaves out the fields named by ignore
// ("/request_time": the field request_time).
func NewForm(ignore ...string) (*FormBody, error) {
	m, err := fieldTrie("form", ignore)
	if err != nil {
		return nil, err
	}
	return &FormBody{ignore: m}, nil
}

// ID implements middleware.BodyFingerprint.
func (*FormBody) ID() string { return Form }

var errFormSemicolon = errors.New(`the form body contains ";", which Go refuses as a separator and other parsers take as one: its fields are ambiguous`)

// formField is one name=value pair, decoded; bare is a name without "=",
// which Rack reads as nil and "a=" as "". An ignored field counts only by its
// name's place among names read as one.
type formField struct {
	name, value   string
	bare, ignored bool
}

// Parts implements middleware.BodyFingerprint: one part per field name
// (`form field "amount"`), in byte order of the names, whose sum covers its
// values in the order sent. Names and values are percent- and plus-decoded;
// empty pairs ("a=1&&b=2") are nothing; "a" is not "a=" (Rack reads nil and
// ""). A ";" or an invalid escape is refused.
//
// Names that an upstream reads as one variable (in another case, PHP's "a.b"
// and "a_b", a[x] and a[] under a: see formReadings) make their order count:
// one more part, orderPart, covers the order they came in, ignored fields'
// names included. A form without such names has no such part, and the
// fingerprint it had before.
func (f *FormBody) Parts(r *http.Request, body []byte, part func(string, [sha256.Size]byte)) error {
	if err := encoded(r, "a form"); err != nil {
		return err
	}
	if bytes.IndexByte(body, ';') >= 0 {
		return errFormSemicolon
	}
	var fields []formField
	for rest := body; len(rest) > 0; {
		var pair []byte
		pair, rest, _ = bytes.Cut(rest, []byte{'&'})
		if len(pair) == 0 {
			continue
		}
		if len(fields) == MaxValues {
			return fmt.Errorf("the form body has more than %d fields", MaxValues)
		}
		rawName, rawValue, hasValue := bytes.Cut(pair, []byte{'='})
		name, err1 := url.QueryUnescape(string(rawName))
		value, err2 := url.QueryUnescape(string(rawValue))
		if err1 != nil || err2 != nil {
			return fmt.Errorf("the form body's field %d has an invalid %%-escape", len(fields)+1)
		}
		fields = append(fields, formField{name, value, !hasValue, f.ignore[name]})
	}
	s := &sink{h: sha256.New()}
	var order [sha256.Size]byte
	hasOrder := formOrder(s, fields)
	if hasOrder {
		order = s.sum()
	}
	fields = slices.DeleteFunc(fields, func(f formField) bool { return f.ignored })
	slices.SortStableFunc(fields, func(a, b formField) int { return strings.Compare(a.name, b.name) })
	for i := 0; i < len(fields); {
		j := i
		for ; j < len(fields) && fields[j].name == fields[i].name; j++ {
			if fields[j].bare {
				s.buf = append(s.buf, 0)
			} else {
				s.buf = append(s.buf, 1)
				s.field([]byte(fields[j].value))
			}
		}
		part("form field "+strconv.Quote(fields[i].name), s.sum())
		i = j
	}
	if hasOrder {
		part(orderPart, order)
	}
	return nil
}
