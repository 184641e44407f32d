package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The help of a setting (its doc comment; and a go, caddy or default tag) is plain, as
// --help prints it, with one mark: 'x' is a literal, code in the table. A quote
// opens a literal only at the start or after a space or one of ([{,;:/" and
// closes it before the end, a space or one of ,.;:)]}, so an apostrophe
// (Redis's, clients') is an apostrophe. Besides, the table shows as code the
// names of settings (lock_ttl), flags (--store) and variables (IDEMPROXY_…),
// and links docs/PAGE.md#anchor to its page, titled by the heading it names.

var (
	wordRe  = regexp.MustCompile(`--[a-z][a-z0-9-]*|IDEMPROXY_[A-Z0-9_]+|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|docs/[a-z0-9-]+\.md(?:#[a-z0-9-]+)?`)
	openers = " ([{,;:/\""
	closers = " ,.;:)]}"
)

// markdown renders text as a Markdown table cell.
func (m *model) markdown(text string) (string, error) {
	var b strings.Builder
	rest := text
	for rest != "" {
		i := quoteOpen(rest)
		if i < 0 {
			b.WriteString(m.words(rest))
			break
		}
		j := quoteClose(rest, i+1)
		if j < 0 {
			return "", fmt.Errorf("%q: a literal opened at %q is not closed", text, rest[i:])
		}
		b.WriteString(m.words(rest[:i]))
		b.WriteString("`" + escape(rest[i+1:j]) + "`")
		rest = rest[j+1:]
	}
	if err := m.linkErr; err != nil {
		m.linkErr = nil
		return "", fmt.Errorf("%q: %w", text, err)
	}
	return b.String(), nil
}

// quoteOpen returns the index of the first quote in s that opens a literal,
// or -1.
func quoteOpen(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' && (i == 0 || strings.IndexByte(openers, s[i-1]) >= 0) && i+1 < len(s) && s[i+1] != ' ' {
			return i
		}
	}
	return -1
}

// quoteClose returns the index of the quote at or after from that closes a
// literal, or -1.
func quoteClose(s string, from int) int {
	for j := from; j < len(s); j++ {
		if s[j] == '\'' && j > from && (j+1 == len(s) || strings.IndexByte(closers, s[j+1]) >= 0) {
			return j
		}
	}
	return -1
}

// words renders plain text: setting names, flags and variables as code, links
// to the docs, and | escaped.
func (m *model) words(s string) string {
	var b strings.Builder
	last := 0
	for _, loc := range wordRe.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		b.WriteString(escape(s[last:loc[0]]))
		last = loc[1]
		switch {
		case strings.HasPrefix(w, "docs/"):
			b.WriteString(m.link(w))
		case strings.HasPrefix(w, "--") || strings.HasPrefix(w, "IDEMPROXY_") || m.names[w]:
			b.WriteString("`" + w + "`")
		default:
			b.WriteString(w)
		}
	}
	b.WriteString(escape(s[last:]))
	return b.String()
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// link is a Markdown link from docs/settings.md to the page docs/PAGE.md (and
// its anchor), titled by the heading it names.
func (m *model) link(target string) string {
	page, anchor, _ := strings.Cut(strings.TrimPrefix(target, "docs/"), "#")
	text, err := os.ReadFile(filepath.Join(m.root, "docs", page))
	if err != nil {
		m.linkErr = cmp.Or(m.linkErr, fmt.Errorf("%s: %w", target, err))
		return target
	}
	title, ok := heading(string(text), anchor)
	if !ok {
		m.linkErr = cmp.Or(m.linkErr, fmt.Errorf("%s: no heading with that anchor", target))
		return target
	}
	href := page
	if anchor != "" {
		href += "#" + anchor
	}
	return "[" + title + "](" + href + ")"
}

// heading returns the text of the heading of a Markdown page whose GitHub
// anchor is anchor; with no anchor, of its first heading.
func heading(page, anchor string) (string, bool) {
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	fence := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if anchor == "" || a == anchor {
			return strings.ReplaceAll(h, "`", ""), true
		}
	}
	return "", false
}
