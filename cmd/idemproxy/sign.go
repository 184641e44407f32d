package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
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
	encoding := fs.String("webhook-encoding", webhook.Encodings()[0], "")
	prefix := fs.String("webhook-prefix", "", "")
	usage := func() { fmt.Fprint(stderr, signUsage()) }
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

// signUsage is the usage of `idemproxy sign`, what it says of the presets read
// from their descriptions (webhook.Presets).
func signUsage() string {
	var signsID, sendsID, timestamp, custom []string
	for _, p := range webhook.Presets() {
		switch {
		case p.SignsID:
			signsID = append(signsID, p.Name)
		case p.ID != "":
			sendsID = append(sendsID, p.Name)
		}
		if p.Timestamp {
			timestamp = append(timestamp, p.Name)
		}
		if p.Custom {
			custom = append(custom, p.Name)
		}
	}
	id := "the delivery id"
	if len(signsID) > 0 {
		id += ": " + conf.OrList(signsID) + " signs it (required there)"
	}
	if len(sendsID) > 0 {
		id += "; " + conf.OrList(sendsID) + " sends it unsigned"
	}
	hmac := strings.Join(custom, ", ")
	return fmt.Sprintf(`usage: idemproxy sign --webhook PRESET --secret env:NAME|file:PATH [--id ID] [--body TEXT | --body-file FILE|-]

Prints the headers a webhook provider would send with the body, signed with the
secret (the first, for a file), one "Name: value" line each: to try a route
that verifies signatures by hand, e.g.
  mapfile -t h < <(idemproxy sign --webhook stripe --secret env:STRIPE_SECRET --body-file event.json)
  curl -X POST 127.0.0.1:8080/webhooks/stripe --data-binary @event.json "${h[@]/#/-H}"

  --webhook PRESET          %s
  --secret REF              env:NAME or file:PATH, as in webhook_secrets
  --id ID                   %s
  --at UNIX                 the signed time (%s); default now
  --body TEXT               the body
  --body-file FILE          the body, from a file (- for standard input)
  --webhook-header NAME     %s: the signature's header
  --webhook-encoding ENC    %s: %s (default) or %s
  --webhook-prefix TEXT     %s: text before the signature
`, conf.OrList(webhook.Names()), id, strings.Join(timestamp, ", "), hmac, hmac, webhook.Encodings()[0], conf.OrList(webhook.Encodings()[1:]), hmac)
}
