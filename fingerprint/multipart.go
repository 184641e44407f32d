package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// MultipartBody is the multipart reading (RFC 2046; multipart/form-data, RFC
// 7578). Build it with NewMultipart.
type MultipartBody struct {
	ignore map[string]bool
}

// NewMultipart returns the multipart reading that leaves out the parts whose
// form-data name ignore names ("/request_time").
func NewMultipart(ignore ...string) (*MultipartBody, error) {
	m, err := fieldTrie("multipart", ignore)
	if err != nil {
		return nil, err
	}
	return &MultipartBody{ignore: m}, nil
}

// ID implements middleware.BodyFingerprint.
func (*MultipartBody) ID() string { return Multipart }

// formDataHeaders are the headers of a multipart/form-data part that carry
// meaning; RFC 7578 §4.8 has receivers ignore every other one. Each is compared
// in its parsed form (media types and parameter names lower-cased, parameters
// sorted). The parts of other multipart types (multipart/related refers to
// Content-ID) count every header.
var formDataHeaders = []string{"Content-Disposition", "Content-Type", "Content-Transfer-Encoding"}

// Parts implements middleware.BodyFingerprint: the media type (its boundary
// left out), then one part per body part in the order sent ("multipart part
// 2", counted from 1 among all parts, left out or not), whose sum covers the
// headers that carry meaning and the part's bytes. The preamble and epilogue
// carry none (RFC 2046 §5.1.1). A request whose Content-Type is not one
// multipart type with a boundary, a malformed body, or a part with one of
// those headers twice or unparsable is refused.
func (m *MultipartBody) Parts(r *http.Request, body []byte, part func(string, [sha256.Size]byte)) error {
	if err := encoded(r, "multipart"); err != nil {
		return err
	}
	cts := r.Header.Values("Content-Type")
	if len(cts) != 1 {
		return errors.New("a multipart body needs exactly one Content-Type header")
	}
	mt, params, err := mime.ParseMediaType(cts[0])
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return errors.New("the Content-Type is not a multipart type with a boundary")
	}
	s := &sink{h: sha256.New()}
	s.field([]byte(mt))
	part("", s.sum())
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for n := 1; ; n++ {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the multipart body is malformed before part %d", n)
		}
		if n > MaxValues {
			return fmt.Errorf("the multipart body has more than %d parts", MaxValues)
		}
		name := "multipart part " + strconv.Itoa(n)
		headers := formDataHeaders
		if mt != "multipart/form-data" {
			headers = slices.Sorted(maps.Keys(p.Header))
			s.field([]byte(strconv.Itoa(len(headers))))
		}
		for _, h := range headers {
			vals := p.Header.Values(h)
			if len(vals) > 1 {
				return fmt.Errorf("%s has %s twice", name, h)
			}
			v := ""
			if len(vals) == 1 {
				if v, err = canonicalHeader(h, vals[0]); err != nil {
					return fmt.Errorf("%s has a malformed %s", name, h)
				}
			}
			if mt != "multipart/form-data" {
				s.field([]byte(h))
			}
			s.field([]byte(v))
		}
		if m.ignore[p.FormName()] && p.FormName() != "" {
			s.sum() // discard
			continue
		}
		if err := s.rest(p); err != nil {
			return fmt.Errorf("the multipart body is malformed in part %d", n)
		}
		part(name, s.sum())
	}
}

// canonicalHeader is a part header's value in parsed form: a media type or
// disposition parsed, an encoding lower-cased, any other trimmed.
func canonicalHeader(name, v string) (string, error) {
	switch name {
	case "Content-Transfer-Encoding":
		return strings.ToLower(strings.TrimSpace(v)), nil
	case "Content-Type", "Content-Disposition":
	default:
		return strings.TrimSpace(v), nil
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil {
		return "", err
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := []byte(nil)
	out = strconv.AppendQuote(out, mt)
	for _, k := range keys {
		out = append(out, ';')
		out = strconv.AppendQuote(out, k)
		out = append(out, '=')
		out = strconv.AppendQuote(out, params[k])
	}
	return string(out), nil
}
