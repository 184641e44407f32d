package proxy

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/idemproxy/idemproxy/webhook"
)

// signMain runs `idemproxy sign`: it prints the headers a provider would send
// with a body, signed as a webhook route with the same settings expects, one
// "Name: value" line each, for trying a route by hand (and the demo).
func signMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sign", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	preset := fs.String("webhook", "", "")
	secret := fs.String("secret", "", "")
	id := fs.String("id", "", "")
	at := fs.Int64("at", 0, "")
	bodyText := fs.String("body", "", "")
	bodyFile := fs.String("body-file", "", "")
	header := fs.String("webhook-header", "", "")
	encoding := fs.String("webhook-encoding", "hex", "")
	prefix := fs.String("webhook-prefix", "", "")
	usage := func() {
		fmt.Fprint(stderr, `usage: idemproxy sign --webhook PRESET --secret env:NAME|file:PATH [--id ID] [--body TEXT | --body-file FILE|-]

Prints the headers a webhook provider would send with the body, signed with the
secret (the first, for a file), one "Name: value" line each: to try a route
that verifies signatures by hand, e.g.
  mapfile -t h < <(idemproxy sign --webhook stripe --secret env:STRIPE_SECRET --body-file event.json)
  curl -X POST 127.0.0.1:8080/webhooks/stripe --data-binary @event.json "${h[@]/#/-H}"

  --webhook PRESET          standard, stripe, github or hmac
  --secret REF              env:NAME or file:PATH, as in webhook_secrets
  --id ID                   the delivery id: standard signs it (required there); github sends it unsigned
  --at UNIX                 the signed time (standard, stripe); default now
  --body TEXT               the body
  --body-file FILE          the body, from a file (- for standard input)
  --webhook-header NAME     hmac: the signature's header
  --webhook-encoding ENC    hmac: hex (default) or base64
  --webhook-prefix TEXT     hmac: text before the signature
`)
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *preset == "" || *secret == "" || (*bodyText != "") == (*bodyFile != "") {
		usage()
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	body := []byte(*bodyText)
	if *bodyFile != "" {
		var err error
		if *bodyFile == "-" {
			body, err = io.ReadAll(stdin)
		} else {
			body, err = os.ReadFile(*bodyFile)
		}
		if err != nil {
			fmt.Fprintln(stderr, "idemproxy sign: --body-file:", err)
			return 2
		}
	}
	secrets, err := webhook.LoadSecrets([]string{*secret})
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy sign: --secret:", err)
		return 2
	}
	when := time.Now()
	if *at != 0 {
		when = time.Unix(*at, 0)
	}
	w := webhook.Webhook{Preset: *preset, Secrets: secrets, Header: *header, Encoding: *encoding, Prefix: *prefix}
	h, err := w.Sign(*id, when, body)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy sign:", err)
		return 2
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(stdout, "%s: %s\n", name, h.Get(name))
	}
	return 0
}
