package cache

import (
	"cmp"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// redacted stands for a secret in what RedactURL and RedactError return.
const redacted = "xxxxx"

// secretWords make a query parameter or a keyword/value keyword a secret
// when its name contains one, in any case: password (PostgreSQL's, in a URL's
// query or a keyword/value string; a Redis Sentinel URL's), sslpassword
// (PostgreSQL's client key), and the like of other drivers.
var secretWords = []string{"password", "passwd", "pwd", "secret", "token", "credential"}

func secretName(name string) bool {
	name = strings.ToLower(name)
	return slices.ContainsFunc(secretWords, func(w string) bool { return strings.Contains(name, w) })
}

// RedactURL returns a store URL with its secrets replaced, for logs and
// errors: the password of user:password@, and the values of the query
// parameters named like a secret (password=, sslpassword=). Text without
// "://" is read as PostgreSQL's keyword/value form (host=db password=…),
// whose secret keywords' values are replaced; other text is returned as it
// is. A URL that does not parse loses everything between "://" and its last
// "@".
func RedactURL(rawURL string) string {
	scheme, rest, isURL := strings.Cut(rawURL, "://")
	if !isURL {
		return redactKeywords(rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// The query's secrets first: one may hold an "@" that is not the
		// userinfo's.
		if base, query, ok := strings.Cut(rest, "?"); ok {
			rest = base + "?" + redactQuery(query)
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = redacted + rest[at:]
		}
		return scheme + "://" + rest
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
			changed = true
		}
	}
	if q := redactQuery(u.RawQuery); q != u.RawQuery {
		u.RawQuery = q
		changed = true
	}
	if !changed {
		return rawURL
	}
	return u.String()
}

// redactQuery replaces the values of a raw query's secret parameters,
// keeping its order and the rest as they are.
func redactQuery(query string) string {
	if query == "" {
		return query
	}
	parts := strings.Split(query, "&")
	for i, part := range parts {
		name, value, _ := strings.Cut(part, "=")
		if value != "" && secretName(unescape(name)) {
			parts[i] = name + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// keyword is one keyword=value of PostgreSQL's keyword/value form (as pgx
// reads it): spaces may surround the "=", and a value is a word or quoted
// ('…', with \' and \\ escaped).
var keyword = regexp.MustCompile(`(^|\s)([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']+)`)

// redactKeywords replaces the values of text's secret keywords.
func redactKeywords(text string) string {
	if !strings.Contains(text, "=") {
		return text
	}
	return keyword.ReplaceAllStringFunc(text, func(m string) string {
		sub := keyword.FindStringSubmatch(m)
		if !secretName(sub[2]) {
			return m
		}
		return sub[1] + sub[2] + sub[3] + redacted
	})
}

// secrets are the secrets of a store URL (or keyword/value string) as they
// may appear in an error's text: as written, and decoded.
func secrets(rawURL string) []string {
	var out []string
	add := func(s ...string) {
		for _, v := range s {
			if v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	_, rest, isURL := strings.Cut(rawURL, "://")
	if !isURL {
		for _, sub := range keyword.FindAllStringSubmatch(rawURL, -1) {
			if v := sub[4]; secretName(sub[2]) {
				add(v)
				if strings.HasPrefix(v, "'") {
					v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
					add(v, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v))
				}
			}
		}
		return out
	}
	var querySecrets []string
	if _, query, ok := strings.Cut(rest, "?"); ok {
		query, _, _ = strings.Cut(query, "#")
		for part := range strings.SplitSeq(query, "&") {
			if name, value, _ := strings.Cut(part, "="); secretName(unescape(name)) && value != "" {
				querySecrets = append(querySecrets, value)
			}
		}
	}
	if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		pw, _ := u.User.Password()
		add(pw, url.UserPassword("", pw).String()[1:]) // decoded, and as a URL writes it
		authority := rest
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			authority = rest[:end]
		}
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			if _, written, ok := strings.Cut(authority[:at], ":"); ok {
				add(written) // as its user wrote it
			}
		}
	} else if err != nil {
		// The userinfo ends at the last "@" outside the query's secrets.
		masked := rest
		for _, v := range querySecrets {
			masked = strings.ReplaceAll(masked, v, strings.Repeat("x", len(v)))
		}
		if at := strings.LastIndex(masked, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw, unescape(pw))
			}
		}
	}
	for _, v := range querySecrets {
		add(v, unescape(v))
	}
	return out
}

// RedactError keeps the secrets of rawURL (a store URL, or a keyword/value
// string: RedactURL) out of an error that quotes them.
func RedactError(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	all := secrets(rawURL)
	slices.SortFunc(all, func(a, b string) int { return cmp.Compare(len(b), len(a)) }) // longest first
	for _, s := range all {
		text = strings.ReplaceAll(text, s, redacted)
	}
	if text == err.Error() {
		return err
	}
	return errors.New(text)
}
