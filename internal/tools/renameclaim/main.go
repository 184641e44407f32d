// Command renameclaim gives the claimed-key idea one word, "claim", where it
// had three (lock, claim, lease): LockOrGet is ClaimOrGet, cache.Lock is
// cache.Claim, its Lease is Duration, ErrLockLost is ErrClaimLost,
// Settings.LockTTL is ClaimTTL, and the prose says "claim" (an in-flight
// claim, a claim token, a claim that lapsed).
//
// It rewrites the files git tracks, in every module, and can be run again at
// any time (on a branch merged since): every rule rewrites an old word into a
// new one that no rule reads, so a second run changes nothing.
//
//	go run ./internal/tools/renameclaim        # rewrite, and list the files changed
//	go run ./internal/tools/renameclaim -n     # list what would change, rewrite nothing
//
// Then gofmt -l . is empty (a rename may change a struct's alignment: the
// tool runs gofmt on the Go files it changed), and every module builds.
//
// What it changes in a Go file: the identifiers (the whole text: code,
// comments, strings), and the prose in comments and in messages (a string
// that begins "idempotency ", or any string literal given to a log or error
// call). In Markdown: the identifiers everywhere, the prose outside code
// blocks. What it never changes: user-visible names (setting names such as
// lock_ttl and their flags, variables and Caddyfile subdirectives, metric
// names and label values, JSON fields and values of the admin API such as
// "lease_lapsed", data formats and the stores' schemas), struct tags (names, units, defaults), and the pages
// that record history or the names themselves: docs/upgrading.md,
// docs/settings.md (generated: go generate ./test/settingsdoc after a
// run), BENCHMARKS.md, and this program. What it leaves: the mutexes (a
// shard's lock, Lock/Unlock), SQL's SKIP LOCKED and row locks, Redis and
// PostgreSQL lock words in scripts and statements.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// rule rewrites the matches of re into repl (regexp.Expand syntax). skip, when
// set, vetoes a match given the text and the match's [start, end).
type rule struct {
	re   *regexp.Regexp
	repl string
	skip func(text string, start, end int) bool
}

func r(pattern, repl string) rule { return rule{re: regexp.MustCompile(pattern), repl: repl} }

// followedByParen vetoes a match that is a call (a mutex's Lock()).
func followedByParen(text string, _, end int) bool {
	return end < len(text) && text[end] == '('
}

// afterDot vetoes a match that is a selector's field or method (mu.Lock).
func afterDot(text string, start, _ int) bool {
	return start > 0 && text[start-1] == '.'
}

// idents are the Go identifiers, renamed wherever they appear.
var idents = []rule{
	r(`\bLockOrGet\b`, "ClaimOrGet"),
	r(`\blockOrGet\b`, "claimOrGet"),
	r(`\bErrLockLost\b`, "ErrClaimLost"),
	r(`\bLockTTL\b`, "ClaimTTL"),
	r(`\berrLeaseLapsed\b`, "errClaimLapsed"),
	r(`\bfailLock\b`, "failClaim"),
	r(`\blockLostOnce\b`, "claimLostOnce"),
	{re: regexp.MustCompile(`\bcache\.Lock\b`), repl: "cache.Claim", skip: followedByParen},
	r(`\bLock\.(Token|Fingerprint|Lease|Trace|Owner|Hold|TTL)\b`, "Claim.$1"),
	r(`\bClaim\.Lease\b`, "Claim.Duration"),
	// The field, where the type is known: a selector, a key of a literal.
	{re: regexp.MustCompile(`\.Lease\b`), repl: ".Duration"},
	{re: regexp.MustCompile(`\bLease:`), repl: "Duration:"},
}

// cacheIdents are those of package cache itself, where the type is
// unqualified.
var cacheIdents = []rule{
	{re: regexp.MustCompile(`\bLock\b`), repl: "Claim", skip: func(t string, s, e int) bool { return afterDot(t, s, e) || followedByParen(t, s, e) }},
	r(`(?m)^(\t)Lease( +time\.Duration)`, "${1}Duration$2"),
	r(`// Lease is how long the lock lives`, "// Duration is how long the claim lives"),
}

// middlewareIdents are the core's: the claim asked of the store.
var middlewareIdents = []rule{
	r(`\bfunc \(c \*claim\) lock\(`, "func (c *claim) asked("),
	r(`\bc\.lock\(owner\)`, "c.asked(owner)"),
	r(`\bh, key, lock := c\.h, c\.storeKey, c\.asked\(owner\)`, "h, key, want := c.h, c.storeKey, c.asked(owner)"),
	r(`\bh\.store\.ClaimOrGet\(sctx, key, lock\)`, "h.store.ClaimOrGet(sctx, key, want)"),
	r(`\brec\.Fingerprint != lock\.Fingerprint\b`, "rec.Fingerprint != want.Fingerprint"),
	r(`// lock is what c asks the store for\.`, "// asked is the claim c asks the store for."),
}

// shared vetoes a prose match on a line about a mutex or a database's own
// locks.
var notTheClaim = regexp.MustCompile(`(?i)shard|mutex|advisory|row lock|table lock|exclusive|skip locked|lock-free|\bmu\b|Unlock`)

// prose is the idea in words, in comments, messages and Markdown.
var prose = []rule{
	r(`\b(lock|claim) whose (lease|claim) (lapse[sd]?|lapsing|ended|ends|end)\b`, "claim that $3"),
	r(`\b(lock|claim)s whose (lease|claim)s? (lapse[sd]?|lapsing|ended|ends|end)\b`, "claims that $3"),
	r(`\bin-flight lock(s?)\b`, "in-flight claim$1"),
	r(`\block token(s?)\b`, "claim token$1"),
	r(`\block lost\b`, "claim lost"),
	r(`\blease(s?) (lapse[sd]?|lapsing|ended|ends|end|expired|expires)\b`, "claim$1 $2"),
	r(`\blapsed (?:lease|lock)(s?)\b`, "lapsed claim$1"),
	r(`\blease renewal(s?)\b`, "claim renewal$1"),
	r(`\b(its|the|a|an|whose|their|one|this|that|each|every|own|live|held|marked|new|short|whole|same|other|another|no|[A-Za-z]+'s) (?:lease|lock)(s?)\b`, "$1 claim$2"),
}

func main() {
	dry := flag.Bool("n", false, "list the files that would change, rewrite nothing")
	flag.Parse()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		fail(fmt.Errorf("not in a git checkout: %w", err))
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "*.go", "*.md").Output()
	if err != nil {
		fail(err)
	}
	var changed, gofiles []string
	for _, f := range strings.Fields(string(out)) {
		if skipFile(f) {
			continue
		}
		path := filepath.Join(root, f)
		src, err := os.ReadFile(path)
		if err != nil {
			continue // deleted in the working tree
		}
		var dst []byte
		if strings.HasSuffix(f, ".go") {
			dst, err = rewriteGo(f, src)
			if err != nil {
				fail(fmt.Errorf("%s: %w", f, err))
			}
		} else {
			dst = rewriteMarkdown(src)
		}
		if bytes.Equal(src, dst) {
			continue
		}
		changed = append(changed, f)
		if *dry {
			continue
		}
		if err := os.WriteFile(path, dst, 0o644); err != nil {
			fail(err)
		}
		if strings.HasSuffix(f, ".go") {
			gofiles = append(gofiles, path)
		}
	}
	if len(gofiles) > 0 {
		cmd := exec.Command("gofmt", append([]string{"-w"}, gofiles...)...)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("gofmt: %w", err))
		}
	}
	sort.Strings(changed)
	for _, f := range changed {
		fmt.Println(f)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "renameclaim:", err)
	os.Exit(1)
}

func skipFile(f string) bool {
	switch f {
	case "docs/upgrading.md", "docs/settings.md", "BENCHMARKS.md":
		return true
	}
	return strings.HasPrefix(f, "internal/tools/renameclaim/")
}

func apply(rules []rule, text string) string {
	for _, ru := range rules {
		text = replace(ru, text)
	}
	return text
}

// replace rewrites ru's matches in text, keeping the case of the first letter
// of a prose match ("The lock" is "The claim").
func replace(ru rule, text string) string {
	ms := ru.re.FindAllStringSubmatchIndex(text, -1)
	if ms == nil {
		return text
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		if ru.skip != nil && ru.skip(text, m[0], m[1]) {
			continue
		}
		b.WriteString(text[last:m[0]])
		rep := string(ru.re.ExpandString(nil, ru.repl, text, m))
		old, _ := utf8.DecodeRuneInString(text[m[0]:])
		if first, n := utf8.DecodeRuneInString(rep); unicode.IsUpper(old) && unicode.IsLower(first) {
			rep = string(unicode.ToUpper(first)) + rep[n:]
		}
		b.WriteString(rep)
		last = m[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// proseLines rewrites the prose of text line by line, leaving the lines about
// another lock.
func proseLines(text string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if !notTheClaim.MatchString(l) {
			lines[i] = apply(prose, l)
		}
	}
	return strings.Join(lines, "")
}

func rewriteGo(name string, src []byte) ([]byte, error) {
	text := apply(idents, string(src))
	dir := filepath.ToSlash(filepath.Dir(name))
	switch dir {
	case "cache":
		text = apply(cacheIdents, text)
	case "middleware":
		text = apply(middlewareIdents, text)
	}
	// The prose: comments, and the strings that are messages.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, text, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	type span struct{ start, end int }
	var spans []span
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			spans = append(spans, span{fset.Position(c.Pos()).Offset, fset.Position(c.End()).Offset})
		}
	}
	messages := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				messages[n.Tag] = false // struct tags: never
			}
		case *ast.CallExpr:
			if isMessageCall(n.Fun) {
				for _, a := range n.Args {
					ast.Inspect(a, func(m ast.Node) bool {
						if lit, ok := m.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if _, seen := messages[lit]; !seen {
								messages[lit] = true
							}
						}
						_, call := m.(*ast.CallExpr)
						return !call
					})
				}
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && strings.HasPrefix(n.Value, `"idempotency `) {
				if _, seen := messages[n]; !seen {
					messages[n] = true
				}
			}
		}
		return true
	})
	for lit, ok := range messages {
		if ok {
			spans = append(spans, span{fset.Position(lit.Pos()).Offset, fset.Position(lit.End()).Offset})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var b strings.Builder
	last := 0
	for _, s := range spans {
		if s.start < last {
			continue
		}
		b.WriteString(text[last:s.start])
		b.WriteString(proseLines(text[s.start:s.end]))
		last = s.end
	}
	b.WriteString(text[last:])
	out := b.String()
	// A rewrite must leave the file's tokens valid Go.
	var sc scanner.Scanner
	var errs scanner.ErrorList
	sc.Init(fset.AddFile(name, -1, len(out)), []byte(out), func(pos token.Position, msg string) { errs.Add(pos, msg) }, 0)
	for {
		if _, tok, _ := sc.Scan(); tok == token.EOF {
			break
		}
	}
	if errs.Len() > 0 {
		return nil, errs.Err()
	}
	return []byte(out), nil
}

// isMessageCall reports whether fun is a log or error call, whose string
// arguments are messages.
func isMessageCall(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch sel.Sel.Name {
	case "LogAttrs", "Log", "Debug", "Info", "Warn", "Error", "DebugContext", "InfoContext", "WarnContext", "ErrorContext", "Errorf":
		return true
	case "New":
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "errors"
	}
	return false
}

func rewriteMarkdown(src []byte) []byte {
	lines := strings.SplitAfter(apply(idents, string(src)), "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if !fence && !notTheClaim.MatchString(l) {
			lines[i] = apply(prose, l)
		}
	}
	return []byte(strings.Join(lines, ""))
}
