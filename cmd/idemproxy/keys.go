package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/proxy"
)

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// keysMain runs `idemproxy keys get|delete|release|resolve KEY|--hash H` and
// `idemproxy keys list --held`: it calls the admin API (idemproxy's, or with
// --caddy Caddy's, by hash) and prints its JSON answer. Exit 0: found, deleted, released, resolved or listed; 1: not found
// (or, for release and resolve, not an unknown outcome; for --hash, more than
// one record matches); 2: usage or other error.
func keysMain(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	usage := func() {
		fmt.Fprint(stderr, `usage: idemproxy keys get|delete|release|resolve KEY [flags]
       idemproxy keys get|delete|release|resolve --hash KEY_HASH [flags]
       idemproxy keys list --held [--limit N] [--cursor C | --all]
       idemproxy keys ... --caddy ADDR [--handler NAME]   (Caddy's admin API, by --hash)

Inspect or purge the record of an idempotency key through a running idemproxy's
admin listener. For a key held with an unknown outcome: release it (the next
retry runs), or resolve it with the response its retries get (once you know
what the upstream did). Name the key as the client sent it, with its scope, or
by the key_hash the logs print (no credential needed). list --held lists the
held unknown outcomes and their reconcile jobs.
IDEMPROXY_ADMIN_TOKEN is sent as the admin token.

With --caddy, the same is done through Caddy's admin API (the idempotency
module's /idempotency/ routes) for the keys of a Caddy's idempotency handlers:
name a record by --hash there (Caddy does not find a record by its key).

  --admin ADDR      admin listener (default $IDEMPROXY_ADMIN, else 127.0.0.1:9090)
  --caddy ADDR      Caddy's admin endpoint instead, as its admin option writes it:
                    localhost:2019 (Caddy's default), or unix//path/to/admin.sock
  --handler NAME    with --caddy: the handler whose name subdirective is NAME
                    (needed when Caddy's handlers use more than one store)
  --hash KEY_HASH   the key_hash of a log line (12 digits), or a listing's hash (up to 64)
  --host HOST       the Host the client sent (default: the proxy's --listen address)
  --header 'N: V'   a scope header the client sent (repeatable), e.g. 'Authorization: Bearer …'
  --path /route     a request path, to use that route's settings

list only:
  --held            the held unknown outcomes (required: the one listing there is)
  --limit N         records per page (default 100, at most 1000)
  --cursor C        the page after the one whose next_cursor was C
  --all             every page, as one answer

resolve only:
  --status N                 the status to answer (required, 200-599)
  --body TEXT                the body to answer
  --body-file FILE           the body, from a file (- for standard input)
  --response-header 'N: V'   a header of the answer (repeatable), e.g. 'Content-Type: application/json'
`)
	}
	if len(args) < 1 || (args[0] != "get" && args[0] != "delete" && args[0] != "release" && args[0] != "resolve" && args[0] != "list") {
		usage()
		return 2
	}
	verb := args[0]
	rest := args[1:]
	var key string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		key, rest = rest[0], rest[1:]
	}
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	admin := getenv("IDEMPROXY_ADMIN")
	if admin == "" {
		admin = "127.0.0.1:9090"
	}
	fs.StringVar(&admin, "admin", admin, "")
	caddyAdmin := fs.String("caddy", "", "")
	handler := fs.String("handler", "", "")
	host := fs.String("host", "", "")
	path := fs.String("path", "", "")
	var headers, respHeaders headerList
	fs.Var(&headers, "header", "")
	status := fs.Int("status", 0, "")
	bodyText := fs.String("body", "", "")
	bodyFile := fs.String("body-file", "", "")
	fs.Var(&respHeaders, "response-header", "")
	hash := fs.String("hash", "", "")
	held := fs.Bool("held", false, "")
	limit := fs.Int("limit", 0, "")
	cursor := fs.String("cursor", "", "")
	all := fs.Bool("all", false, "")
	if err := fs.Parse(rest); err != nil {
		fmt.Fprintln(stderr, "idemproxy keys:", err)
		usage()
		return 2
	}
	api := proxyAdmin(admin, getenv)
	if *caddyAdmin != "" {
		var err error
		if api, err = caddyAdminAPI(*caddyAdmin, *handler); err != nil {
			fmt.Fprintln(stderr, "idemproxy keys: --caddy:", err)
			return 2
		}
		if key != "" || fs.NArg() > 0 || *host != "" || len(headers) > 0 || *path != "" {
			fmt.Fprintf(stderr, "idemproxy keys %s --caddy: name the record by --hash KEY_HASH (the key_hash of the logs, of {http.idempotency.key_hash} or of keys list --held): Caddy's admin API does not find a record by its key, so KEY, --host, --header and --path are for idemproxy\n", verb)
			return 2
		}
	} else if *handler != "" {
		fmt.Fprintln(stderr, "idemproxy keys: --handler picks one of Caddy's handlers: it is for --caddy")
		return 2
	}
	if verb == "list" {
		if !*held || key != "" || fs.NArg() > 0 || *hash != "" {
			fmt.Fprintln(stderr, "idemproxy keys list: give --held (and no key): the held unknown outcomes are what is listed")
			return 2
		}
		return keysList(api, *limit, *cursor, *all, stdout, stderr)
	}
	if *held || *limit != 0 || *cursor != "" || *all {
		fmt.Fprintf(stderr, "idemproxy keys %s: --held, --limit, --cursor and --all are for list\n", verb)
		return 2
	}
	var payload io.Reader
	if verb == "resolve" {
		res, err := resolution(*status, *bodyText, *bodyFile, respHeaders, stdin)
		if err != nil {
			fmt.Fprintln(stderr, "idemproxy keys resolve:", err)
			return 2
		}
		payload = bytes.NewReader(res)
	} else if *status != 0 || *bodyText != "" || *bodyFile != "" || len(respHeaders) > 0 {
		fmt.Fprintf(stderr, "idemproxy keys %s: --status, --body, --body-file and --response-header are for resolve\n", verb)
		return 2
	}
	if key == "" && fs.NArg() == 1 {
		key = fs.Arg(0)
	} else if fs.NArg() > 0 || (key == "") == (*hash == "") {
		if key != "" && *hash != "" {
			fmt.Fprintf(stderr, "idemproxy keys %s: give a KEY or --hash, not both\n", verb)
		} else {
			usage()
		}
		return 2
	}
	q := url.Values{}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "host" {
			q.Set("host", *host)
		}
	})
	if *path != "" {
		q.Set("path", *path)
	}
	// Scope headers travel as query parameters, so the admin request's own
	// Authorization header can carry the admin token.
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			fmt.Fprintf(stderr, "idemproxy keys: --header %q: want 'Name: value'\n", h)
			return 2
		}
		q.Add(strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(value))
	}
	endpoint := map[string]string{"get": "/keys/", "delete": "/keys/", "release": "/release/", "resolve": "/resolve/"}[verb]
	target := api.base + endpoint + url.PathEscape(key)
	if *hash != "" {
		if *host != "" || len(headers) > 0 {
			fmt.Fprintf(stderr, "idemproxy keys %s: --hash names the record alone: --host and --header are for a KEY\n", verb)
			return 2
		}
		target = api.base + strings.TrimSuffix(endpoint, "/")
		q.Set("hash", *hash)
	}
	api.query(q)
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	method := map[string]string{"get": http.MethodGet, "delete": http.MethodDelete, "release": http.MethodPost, "resolve": http.MethodPost}[verb]
	req, err := http.NewRequest(method, target, payload)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy keys:", err)
		return 2
	}
	if method == http.MethodPost {
		// The admin API takes POSTs as JSON only (a browser cannot send that
		// cross-origin without a preflight), release with its empty body too.
		req.Header.Set("Content-Type", "application/json")
	}
	code, body, ok := api.call(req, stderr)
	if !ok {
		return 2
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") != nil {
		fmt.Fprintf(stderr, "idemproxy keys: admin API answered %d with non-JSON: %.200s%s\n", code, body, api.hint(code))
		return 2
	}
	stdout.Write(bytes.TrimSpace(pretty.Bytes()))
	fmt.Fprintln(stdout)
	switch code {
	case http.StatusOK:
		return 0
	case http.StatusNotFound, http.StatusConflict:
		return 1
	}
	return 2
}

// adminAPI is where keys sends its requests: idemproxy's admin listener, or
// Caddy's admin endpoint (--caddy), whose idempotency routes take the
// same requests under /idempotency, by hash, and pick a handler by
// ?handler=.
type adminAPI struct {
	addr    string // as given, for messages
	base    string // the URL the admin API's paths follow: http://host:port[/idempotency]
	token   string // the admin token (idemproxy's), sent as a bearer token
	handler string // Caddy's ?handler=
	client  *http.Client
}

// proxyAdmin is idemproxy's admin listener at addr (host:port or a URL), with
// IDEMPROXY_ADMIN_TOKEN.
func proxyAdmin(addr string, getenv func(string) string) adminAPI {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return adminAPI{addr: addr, base: strings.TrimRight(base, "/"), token: getenv(proxy.EnvName("admin-token")),
		client: &http.Client{Timeout: 2 * adminkeys.ListTimeout}}
}

// caddyAdminAPI is Caddy's admin endpoint at addr, as Caddy's admin option
// writes it: host:port (localhost:2019 by default), a URL, or a unix socket
// (unix//path/admin.sock; a |mode after it, Caddy's file mode, is left
// out). Caddy's admin endpoint has no token: idemproxy's is not sent.
func caddyAdminAPI(addr, handler string) (adminAPI, error) {
	api := adminAPI{addr: addr, handler: handler, client: &http.Client{Timeout: 2 * adminkeys.ListTimeout}}
	switch {
	case strings.HasPrefix(addr, "unix/"):
		sock, _, _ := strings.Cut(strings.TrimPrefix(addr, "unix/"), "|")
		if sock == "" {
			return api, fmt.Errorf("%q: want unix//path/to/admin.sock", addr)
		}
		api.base = "http://localhost/idempotency"
		api.client.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
	case strings.Contains(addr, "://"):
		api.base = strings.TrimRight(addr, "/") + "/idempotency"
	default:
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return api, fmt.Errorf("%q: want host:port (Caddy's default: localhost:2019) or unix//path/to/admin.sock", addr)
		}
		api.base = "http://" + addr + "/idempotency"
	}
	return api, nil
}

// hint is what to add to an answer that is not the admin API's: a 404 from
// idemproxy's address may be Caddy's admin endpoint, which serves its keys
// under /idempotency.
func (a adminAPI) hint(status int) string {
	if status != http.StatusNotFound || strings.HasSuffix(a.base, "/idempotency") {
		return ""
	}
	return "\n(is " + a.addr + " Caddy's admin endpoint? Caddy serves the keys under /idempotency: give --caddy " + a.addr + " and --hash)"
}

// query adds to q what the admin API needs on every request: Caddy's
// ?handler=.
func (a adminAPI) query(q url.Values) {
	if a.handler != "" {
		q.Set("handler", a.handler)
	}
}

// call sends req to the admin API (with the admin token, for idemproxy's),
// and returns the answer's status and body; !ok when none came (said on
// stderr).
func (a adminAPI) call(req *http.Request, stderr io.Writer) (int, []byte, bool) {
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "idemproxy keys: admin API at %s: %v\n", a.addr, err)
		return 0, nil, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy keys: reading answer:", err)
		return 0, nil, false
	}
	return resp.StatusCode, body, true
}

// keysList runs `idemproxy keys list --held`: one page, or with all every
// page as one answer.
func keysList(api adminAPI, limit int, cursor string, all bool, stdout, stderr io.Writer) int {
	if all && cursor != "" {
		fmt.Fprintln(stderr, "idemproxy keys list: --all starts at the first page: give --cursor or --all, not both")
		return 2
	}
	var out proxy.HeldPage
	out.Held = []proxy.HeldKey{}
	for pages := 0; ; pages++ {
		q := url.Values{"state": {"held"}}
		if limit != 0 {
			q.Set("limit", fmt.Sprint(limit))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		api.query(q)
		req, err := http.NewRequest(http.MethodGet, api.base+"/keys?"+q.Encode(), nil)
		if err != nil {
			fmt.Fprintln(stderr, "idemproxy keys:", err)
			return 2
		}
		status, body, ok := api.call(req, stderr)
		if !ok {
			return 2
		}
		if status != http.StatusOK {
			fmt.Fprintf(stderr, "idemproxy keys list: admin API answered %d: %.500s%s\n", status, bytes.TrimSpace(body), api.hint(status))
			return 2
		}
		var page proxy.HeldPage
		if err := json.Unmarshal(body, &page); err != nil {
			fmt.Fprintf(stderr, "idemproxy keys list: admin API answered with something else than a page: %v\n", err)
			return 2
		}
		out.Held = append(out.Held, page.Held...)
		out.NextCursor = page.NextCursor
		if !all || page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintln(stdout, string(b))
	return 0
}

// resolution builds the JSON body of POST /resolve/{key} from the resolve flags.
func resolution(status int, text, file string, headers []string, stdin io.Reader) ([]byte, error) {
	if status == 0 {
		return nil, fmt.Errorf("--status is required (the status the retries get, 200-599)")
	}
	req := proxy.ResolveRequest{Status: status, Headers: map[string][]string{}}
	switch {
	case text != "" && file != "":
		return nil, fmt.Errorf("give --body or --body-file, not both")
	case file == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the body from standard input: %w", err)
		}
		req.BodyBase64 = base64.StdEncoding.EncodeToString(b)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--body-file: %w", err)
		}
		req.BodyBase64 = base64.StdEncoding.EncodeToString(b)
	default:
		req.Body = text
	}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("--response-header %q: want 'Name: value'", h)
		}
		name = http.CanonicalHeaderKey(strings.TrimSpace(name))
		req.Headers[name] = append(req.Headers[name], strings.TrimSpace(value))
	}
	return json.Marshal(req)
}
