package fingerprint_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/fingerprint"
)

// Member names that an upstream which ignores case reads as one (Go's
// encoding/json into a struct, System.Text.Json and Jackson case-insensitive)
// make a body that reads two ways: with one member order the upstream binds
// one value, with the other the other. Refused in every object, at any depth,
// ignored or not, whatever the escapes.
func TestJSONRefusesFoldedNames(t *testing.T) {
	bf, err := fingerprint.NewJSON("/request_time")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, body, at string }{
		{"ASCII case", `{"amount":100,"Amount":1}`, ""},
		{"upper case first", `{"AMOUNT":1,"amount":100}`, ""},
		{"Kelvin sign is k (encoding/json)", `{"k":1,"\u212a":2}`, ""},
		{"long s is s (encoding/json)", `{"status":"paid","ſtatus":"void"}`, ""},
		{"dotless i is i (.NET, Java)", `{"id":1,"ıd":2}`, ""},
		{"dotted capital I is i (Java)", `{"id":1,"İD":2}`, ""},
		{"Greek final sigma", `{"σ":1,"ς":2}`, ""},
		{"escaped", `{"amount":1,"\u0041mount":2}`, ""},
		{"nested object", `{"o":{"x":1,"y":{"Ab":1,"aB":2}}}`, `"/o/y"`},
		{"inside an array", `{"items":[{"a":1},{"sku":"x","SKU":"y"}]}`, `"/items/1"`},
		{"an ignored member too", `{"request_time":1,"Request_Time":2}`, ""},
		{"among many", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"B":11}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := digestOf(t, bf, "", c.body)
			if err == nil {
				t.Fatalf("%s accepted", c.body)
			}
			if !strings.Contains(err.Error(), "case") || !strings.Contains(err.Error(), c.at) {
				t.Fatalf("%s: %v, want it to say case, at %s", c.body, err, c.at)
			}
			if _, err := fingerprint.CanonicalJSON([]byte(c.body)); err == nil {
				t.Fatalf("CanonicalJSON accepted %s", c.body)
			}
		})
	}
	for _, ok := range []string{
		`{"a":1,"b":2,"ab":3}`,
		`{"é":1,"e":2,"x":{"É":1}}`,          // é is not e; é and É in different objects
		`{"straße":1,"STRASSE":2}`,           // simple folding: ß is not ss
		`{"a_b":1,"aB":2,"a-b":3}`,           // encoding/json v2 reads these as one only to refuse them itself
		`[{"Id":1},{"id":2},{"ID":3}]`,       // one per object
		`{"amount":1,"nested":{"Amount":2}}`, // different objects
		`{"x":"Amount","amount":"X"}`,        // values are not names
	} {
		if _, _, err := digestOf(t, bf, "", ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// Form field names that some upstream reads as one variable: an ASP.NET Core
// or gorilla/schema upstream ignores case (and Go's folding: the Kelvin sign is
// a k); PHP turns "." and " " (and a "[" that no "]" closes) into "_", drops
// leading spaces and what follows a NUL, and reads "a[x]junk" as a[x]; Rack and
// qs nest "a[x]" under a. Among such names the order they came in decides what
// the upstream reads, so it counts: each order is another request. Fields that
// no upstream relates still move freely.
func TestFormFoldedNamesOrderCounts(t *testing.T) {
	bf, err := fingerprint.NewForm("/meta")
	if err != nil {
		t.Fatal(err)
	}
	swapped := func(name, a, b string) pair { return pair{name, a + "&" + b, b + "&" + a, false} }
	runPairs(t, bf, "", "", []pair{
		swapped("ASCII case", "amount=100", "Amount=1"),
		swapped("Kelvin sign", "k=1", "%E2%84%AA=2"),
		swapped("long s", "status=paid", "%C5%BFtatus=void"),
		swapped("PHP: dot is underscore", "amount.total=1", "amount_total=2"),
		swapped("PHP: space is underscore", "amount+total=1", "amount_total=2"),
		swapped("PHP: unmatched bracket is underscore", "amount%5Btotal=1", "amount_total=2"),
		swapped("PHP: leading spaces dropped", "%20amount=1", "amount=2"),
		swapped("PHP: a NUL ends the name", "amount%00x=1", "amount=2"),
		swapped("PHP: what follows a closing bracket is dropped", "a%5Bx%5D=1", "a%5Bx%5Djunk=2"),
		swapped("PHP: append and index", "a%5B%5D=1", "a%5B0%5D=2"),
		swapped("PHP: a scalar then an array", "a=1", "a%5Bx%5D=2"),
		swapped("Rack: junk after the bracket nests", "a%5Bx%5Djunk=1", "a%5Bx%5D%5Bjunk%5D=2"),
		swapped("qs: dots nest", "a.b=1", "a%5Bb%5D=2"),
		swapped("case in a nested name", "items%5B0%5D.Sku=1", "Items%5B0%5D.sku=2"),
		swapped("an ignored field's place still counts", "meta=x", "meta%5Ba%5D=2"),
		swapped("UTF-8 decoders read what is not UTF-8 as U+FFFD", "%EF=0", "%EA"),
		swapped("and as the character itself", "%EF%BF%BD=0", "%FF%FE=1"),

		{"unrelated fields still move", "amount=1&currency=EUR&card_number=4242&card_cvc=123", "card_cvc=123&currency=EUR&card_number=4242&amount=1", true},
		{"related fields move together", "amount=100&x=1&Amount=1", "x=1&amount=100&Amount=1", true},
		{"an ignored field's value does not count", "meta=x&meta%5Ba%5D=2", "meta=y&meta%5Ba%5D=2", true},
		{"an ignored field alone does not count", "meta=x&a=1", "a=1", true},
		{"a repeated name is one name", "a%5B%5D=1&a%5B%5D=2&b=3", "b=3&a%5B%5D=1&a%5B%5D=2", true},
	})
	_, names, err := digestOf(t, bf, "", "b=1&amount=1&a=2")
	if err != nil || strings.Join(names, ",") != `form field "a",form field "amount",form field "b"` {
		t.Fatalf("a form without related names: %q %v", names, err)
	}
	_, names, err = digestOf(t, bf, "", "Amount=1&amount=2")
	if err != nil || strings.Join(names, ",") != `form field "Amount",form field "amount",the order of form fields read as one name` {
		t.Fatalf("a form with related names: %q %v", names, err)
	}
}

// Multipart parts count in the order sent, so parts whose names an upstream
// folds together (case, PHP's "."/"_") cannot be swapped unseen.
func TestMultipartFoldedNamesInOrder(t *testing.T) {
	bf, _ := fingerprint.NewMultipart()
	field := func(name, v string) string {
		return "Content-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + v
	}
	ct := "multipart/form-data; boundary=B"
	for _, names := range [][2]string{{"amount", "Amount"}, {"amount.total", "amount_total"}, {"k", "\u212a"}} {
		a, _, err := digestOf(t, bf, ct, multipartBody("B", field(names[0], "100"), field(names[1], "1")))
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := digestOf(t, bf, ct, multipartBody("B", field(names[1], "1"), field(names[0], "100")))
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Errorf("%q swapped: one fingerprint", names)
		}
	}
}

// Forms built from names that readers relate in every way they do, in random
// orders: whenever two orders get one fingerprint, every reader (formReaders:
// Go, case-insensitive ones, PHP, Rack) reads them alike. And orders that some
// reader reads differently do occur, so the check is not empty.
func TestFormOneFingerprintOneReading(t *testing.T) {
	names := []string{"a", "A", "a.b", "a_b", "a+b", "a%5Bb", "a%5Bb%5D", "a%5Bb%5Dx", "a%5Bb%5D%5Bx%5D", "a%5B%5D", "a%5B0%5D",
		"a%5B+%5D", "+a", "a%00z", "k", "%E2%84%AA", "%5Ba%5D", "_%5Ba%5D", "%5B%5Ba%5D", "a.", "a%5B", "%C5%BF", "s", "%EF", "%EA",
		"%EF%BF%BD", "b", "a%5B%5D%5Bx%5D", "a%5B%5D%5By%5D", "A%5Bb%5D"}
	bf, _ := fingerprint.NewForm()
	r := rand.New(rand.NewPCG(7, 11))
	same, differ := 0, 0
	for range 20000 {
		n := 2 + r.IntN(4)
		fields := make([]string, n)
		for i := range fields {
			fields[i] = names[r.IntN(len(names))] + "=" + strconv.Itoa(r.IntN(2))
		}
		other := slices.Clone(fields)
		r.Shuffle(n, func(i, j int) { other[i], other[j] = other[j], other[i] })
		a, b := strings.Join(fields, "&"), strings.Join(other, "&")
		da, _, err1 := digestOf(t, bf, "", a)
		db, _, err2 := digestOf(t, bf, "", b)
		if err1 != nil || err2 != nil {
			t.Fatalf("%q %q: %v %v", a, b, err1, err2)
		}
		reader := formReadingsDiffer(a, b)
		if da == db {
			same++
			if reader != "" {
				t.Fatalf("%q and %q: one fingerprint, read differently by %s", a, b, reader)
			}
		} else if reader != "" {
			differ++
		}
	}
	t.Logf("one fingerprint %d times; orders read differently %d times", same, differ)
	if same < 1000 || differ < 1000 {
		t.Fatalf("same %d, read differently %d: the generator misses the point", same, differ)
	}
}
