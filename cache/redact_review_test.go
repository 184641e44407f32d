package cache

import (
	"errors"
	"strings"
	"testing"
)

// TestRedactURLUnparsableWithAtInQuery: a URL that does not parse, whose
// query password holds an "@", must not show any part of that password.
func TestRedactURLUnparsableWithAtInQuery(t *testing.T) {
	const raw = "postgres://db:badport/app?sslmode=disable&password=p@ssw0rdTail"
	got := RedactURL(raw)
	if strings.Contains(got, "ssw0rdTail") || strings.Contains(got, "p@ss") {
		t.Errorf("RedactURL(%q) = %q: shows part of the password", raw, got)
	}
	err := RedactError(errors.New("cannot parse `"+raw+"`: invalid port"), raw)
	if strings.Contains(err.Error(), "ssw0rdTail") {
		t.Errorf("RedactError = %q: shows part of the password", err)
	}
}

// TestRedactErrorPasswordAsWritten: an error that quotes a parsable URL as
// its user wrote it (a password percent-encoded where it need not be) must
// not show the password in that spelling.
func TestRedactErrorPasswordAsWritten(t *testing.T) {
	const raw = "postgres://u:s%65cr%65t@db:5432/app"
	err := RedactError(errors.New("cannot connect to "+raw), raw)
	if strings.Contains(err.Error(), "s%65cr%65t") {
		t.Errorf("RedactError = %q: shows the password as written", err)
	}
}
