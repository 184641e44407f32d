package middleware

import "strings"

// eachCookie calls f with the value of every cookie named name in the Cookie
// header lines, in the order sent, raw: byte for byte as the client sent it
// (quotes, backslashes and non-ASCII bytes included), with only the optional
// whitespace around the pair, its name and its value trimmed.
//
// It is the scope's cookie parser, and deliberately not net/http's: that one
// drops a value with a quote, a backslash or a non-ASCII byte, and every cookie
// once a request carries more than 3000, so sessions that differ only there
// would share one scope. Nothing is dropped here and there is no count limit;
// the server's header size limit bounds the work.
func eachCookie(lines []string, name string, f func(value string)) {
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			n, v, ok := strings.Cut(pair, "=")
			if ok && trimOWS(n) == name {
				f(trimOWS(v))
			}
		}
	}
}

// trimOWS trims optional whitespace (spaces and tabs, RFC 9110 §5.6.3).
func trimOWS(s string) string { return strings.Trim(s, " \t") }
