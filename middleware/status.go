package middleware

import (
	"fmt"
	"strconv"
	"strings"
)

// StatusSet is a set of HTTP status codes (100–599). It keeps the specs it was
// parsed from, as its text form.
type StatusSet struct {
	bits [10]uint64
	spec string // the specs, joined with commas
}

// defaultStoreStatusSpec is the default of store_statuses as written in
// configuration: every final status below 500 except 408, 425 and 429, the
// answers that mean "not executed, try later".
func defaultStoreStatusSpec() []string { return []string{"200-499", "!408", "!425", "!429"} }

// defaultStoreStatuses is the set defaultStoreStatusSpec describes.
func defaultStoreStatuses() StatusSet {
	s, _ := ParseStatuses(defaultStoreStatusSpec()...)
	return s
}

// Has reports whether code is in the set.
func (s StatusSet) Has(code int) bool {
	if code < 0 || code >= 640 {
		return false
	}
	return s.bits[code/64]&(1<<(code%64)) != 0
}

// Empty reports whether the set has no code.
func (s StatusSet) Empty() bool { return s.bits == [10]uint64{} }

// Set parses specs separated by commas or spaces (conf.Value).
func (s *StatusSet) Set(text string) error {
	v, err := ParseStatuses(text)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// String is the specs the set was parsed from, joined with commas.
func (s StatusSet) String() string { return s.spec }

func (s *StatusSet) set(code int, on bool) {
	if on {
		s.bits[code/64] |= 1 << (code % 64)
	} else {
		s.bits[code/64] &^= 1 << (code % 64)
	}
}

// ParseStatuses builds a set from specs: a code ("201"), a class ("2xx"), a range
// ("200-299"), each optionally prefixed by "!" to exclude it. Exclusions apply after
// inclusions; specs with only exclusions start from defaultStoreStatuses.
func ParseStatuses(specs ...string) (StatusSet, error) {
	var s StatusSet
	type span struct {
		lo, hi int
		not    bool
	}
	var spans []span
	included := false
	for _, raw := range specs {
		for _, spec := range strings.Fields(strings.ReplaceAll(raw, ",", " ")) {
			not := strings.HasPrefix(spec, "!")
			body := strings.TrimPrefix(spec, "!")
			lo, hi, err := parseSpan(body)
			if err != nil {
				return StatusSet{}, fmt.Errorf("status %q: %w", spec, err)
			}
			spans = append(spans, span{lo, hi, not})
			included = included || !not
		}
	}
	if len(spans) == 0 {
		return StatusSet{}, fmt.Errorf("no statuses given")
	}
	var specText []string
	for _, raw := range specs {
		specText = append(specText, strings.Fields(strings.ReplaceAll(raw, ",", " "))...)
	}

	if !included {
		s = defaultStoreStatuses()
	}
	for _, excl := range []bool{false, true} {
		for _, sp := range spans {
			if sp.not == excl {
				for c := sp.lo; c <= sp.hi; c++ {
					s.set(c, !excl)
				}
			}
		}
	}
	s.spec = strings.Join(specText, ",")
	return s, nil
}

func parseSpan(spec string) (lo, hi int, err error) {
	if len(spec) == 3 && (strings.HasSuffix(spec, "xx") || strings.HasSuffix(spec, "XX")) {
		d := int(spec[0] - '0')
		if d < 1 || d > 5 {
			return 0, 0, fmt.Errorf("class must be 1xx to 5xx")
		}
		return d * 100, d*100 + 99, nil
	}
	a, b, isRange := strings.Cut(spec, "-")
	if lo, err = parseCode(a); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parseCode(b); err != nil {
			return 0, 0, err
		}
		if hi < lo {
			return 0, 0, fmt.Errorf("range is backwards")
		}
	}
	return lo, hi, nil
}

func parseCode(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || len(s) != 3 || n < 100 || n > 599 {
		return 0, fmt.Errorf("want a status code from 100 to 599")
	}
	return n, nil
}
