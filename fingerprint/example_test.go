package fingerprint_test

import (
	"fmt"

	"github.com/idemproxy/idemproxy/fingerprint"
	"github.com/idemproxy/idemproxy/middleware"
)

// Two serialisations of one document have one canonical form (RFC 8785).
func ExampleCanonicalJSON() {
	a, _ := fingerprint.CanonicalJSON([]byte(`{"b": [1.0, "\u00e9"], "a": 1e2}`))
	b, _ := fingerprint.CanonicalJSON([]byte(`{"a":100,"b":[1,"é"]}`))
	fmt.Println(string(a))
	fmt.Println(string(a) == string(b))
	_, err := fingerprint.CanonicalJSON([]byte(`{"a":1,"a":2}`))
	fmt.Println(err)
	// Output:
	// {"a":100,"b":[1,"é"]}
	// true
	// the JSON body at "/a" has a member name twice (parsers disagree on which one counts)
}

// A Go user sets the reading on the core's settings.
func ExampleNewJSON() {
	bf, err := fingerprint.NewJSON("/request_time")
	if err != nil {
		fmt.Println(err)
		return
	}
	opt := func(s *middleware.Settings) { s.BodyFingerprint = bf }
	_ = opt // middleware.New(store, opt)
	fmt.Println(bf.ID())
	// Output: json
}
