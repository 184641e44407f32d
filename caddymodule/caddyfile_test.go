package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		want    string // JSON of the handler; "" when wantErr
		wantErr string
	}{
		{name: "empty block", input: `idempotency`, want: `{}`},
		{name: "every subdirective", input: `idempotency {
			store redis redis://127.0.0.1:6379/0 {
				prefix app:
			}
			ttl 1h
			lock_ttl 10s
			methods POST PUT
			require_key
			key_header X-Request-Key
			scope {http.request.host} {http.request.header.X-Tenant}
			fingerprint_headers X-Currency
			max_request_body 1MiB
			max_body 2MB
			store_statuses 2xx !204
			ignore_headers Set-Cookie
			fail_open
			handler_timeout 90s
		}`, want: `{"store":{"prefix":"app:","type":"redis","url":"redis://127.0.0.1:6379/0"},"ttl":"1h0m0s",
			"lock_ttl":"10s","methods":["POST","PUT"],"require_key":true,"key_header":"X-Request-Key",
			"scope":["{http.request.host}","{http.request.header.X-Tenant}"],"fingerprint_headers":["X-Currency"],
			"max_request_body":1048576,"max_body":2000000,"store_statuses":["2xx","!204"],"ignore_headers":["Set-Cookie"],
			"fail_open":true,"handler_timeout":"1m30s"}`},
		{name: "zero is a value", input: `idempotency {
			handler_timeout 0
			wait 0s
			fail_open false
		}`, want: `{"handler_timeout":"0s","wait":"0s","fail_open":false}`},
		{name: "empty scope headers: Host only", input: `idempotency {
			scope_headers
		}`, want: `{"scope_headers":[]}`},
		{name: "webhook verification", input: `idempotency {
			webhook hmac
			webhook_secrets env:ACME_OLD file:/run/secrets/acme
			webhook_header X-Signature
			webhook_encoding base64
			webhook_prefix v1=
			webhook_tolerance 2m
			key_source json:/event/id
		}`, want: `{"webhook":"hmac","webhook_secrets":["env:ACME_OLD","file:/run/secrets/acme"],"webhook_header":"X-Signature",
			"webhook_encoding":"base64","webhook_prefix":"v1=","webhook_tolerance":"2m0s","key_source":"json:/event/id"}`},
		{name: "error format template", input: "idempotency {\n\terror_format `{\"errors\":[{\"code\":\"{code}\",\"message\":\"{detail}\"}]}`\n}",
			want: `{"error_format":"{\"errors\":[{\"code\":\"{code}\",\"message\":\"{detail}\"}]}"}`},
		{name: "canonical fingerprint", input: `idempotency {
			fingerprint json
			fingerprint_ignore /request_time /meta/sent_at
		}`, want: `{"fingerprint":"json","fingerprint_ignore":["/request_time","/meta/sent_at"]}`},
		{name: "fingerprint without value", input: `idempotency {
			fingerprint
		}`, wantErr: "wrong argument count"},
		{name: "error format stripe", input: `idempotency {
			error_format stripe
		}`, want: `{"error_format":"stripe"}`},
		{name: "webhook without value", input: `idempotency {
			webhook
		}`, wantErr: "wrong argument count"},
		{name: "two webhook presets", input: `idempotency {
			webhook stripe github
		}`, wantErr: "wrong argument count"},
		{name: "cookie scope", input: `idempotency {
			scope_headers Cookie:session
		}`, want: `{"scope_headers":["Cookie:session"]}`},
		{name: "store URL directly", input: `idempotency {
			store rediss://user:pw@cache:6380/1
		}`, want: `{"store":{"type":"redis","url":"rediss://user:pw@cache:6380/1"}}`},
		{name: "store cluster URL", input: `idempotency {
			store redis+cluster://a:7000?addr=b:7000
		}`, want: `{"store":{"type":"redis","url":"redis+cluster://a:7000?addr=b:7000"}}`},
		{name: "memory store with bounds", input: `idempotency {
			store memory {
				max_records 1000
				max_bytes 64MiB
			}
		}`, want: `{"store":{"max_bytes":67108864,"max_records":1000,"type":"memory"}}`},
		{name: "sizes: Caddy's grammar, as in the proxy", input: `idempotency {
			max_body 10M
			max_request_body 1.5MiB
		}`, want: `{"max_body":10000000,"max_request_body":1572864}`},
		{name: "retry_after", input: `idempotency {
			retry_after 5s
		}`, want: `{"retry_after":"5s"}`},
		{name: "wait", input: `idempotency {
			wait 10s
		}`, want: `{"wait":"10s"}`},
		{name: "in_flight_only", input: `idempotency {
			in_flight_only
		}`, want: `{"in_flight_only":true}`},
		{name: "wait without value", input: "idempotency {\nwait\n}", wantErr: "wrong argument count"},
		{name: "day durations", input: `idempotency {
			ttl 2d
		}`, want: `{"ttl":"48h0m0s"}`},

		{name: "argument on the directive", input: `idempotency extra`, wantErr: "wrong argument count"},
		{name: "duplicate subdirective", input: "idempotency {\nttl 1h\nttl 2h\n}", wantErr: `duplicate subdirective "ttl"`},
		{name: "unknown subdirective", input: "idempotency {\nretries 3\n}", wantErr: `unknown subdirective "retries"`},
		{name: "ttl without value", input: "idempotency {\nttl\n}", wantErr: "wrong argument count"},
		{name: "ttl with two values", input: "idempotency {\nttl 1h 2h\n}", wantErr: "wrong argument count"},
		{name: "bad duration", input: "idempotency {\nlock_ttl soon\n}", wantErr: `lock_ttl: "soon" is not a duration`},
		{name: "negative duration", input: "idempotency {\nttl -1h\n}", wantErr: "must not be negative"},
		{name: "zero max_records", input: "idempotency {\nstore memory {\nmax_records 0\n}\n}", wantErr: "max_records: must be at least 1"},
		{name: "max_records with a unit", input: "idempotency {\nstore memory {\nmax_records 1MiB\n}\n}", wantErr: `max_records: "1MiB" is not a whole number`},
		{name: "zero max_bytes", input: "idempotency {\nstore memory {\nmax_bytes 0B\n}\n}", wantErr: "max_bytes: must be at least 1B"},
		{name: "unknown memory option", input: "idempotency {\nstore memory {\nmax_keys 5\n}\n}", wantErr: `unknown memory store option "max_keys"`},
		{name: "bad size", input: "idempotency {\nmax_body lots\n}", wantErr: `max_body: "lots" is not a size`},
		{name: "size without a unit", input: "idempotency {\nmax_body 10\n}", wantErr: `max_body: "10" has no unit`},
		{name: "max_bytes without a unit", input: "idempotency {\nstore memory {\nmax_bytes 10\n}\n}", wantErr: `max_bytes: "10" has no unit`},
		{name: "setting with a block", input: "idempotency {\nttl 1h {\nx\n}\n}", wantErr: "takes no block"},

		{name: "scope without values", input: "idempotency {\nscope\n}", wantErr: "wrong argument count"},
		{name: "name", input: "idempotency {\nname charges\n}", want: `{"name":"charges"}`},
		{name: "name without a value", input: "idempotency {\nname\n}", wantErr: "wrong argument count"},
		{name: "name with two", input: "idempotency {\nname a b\n}", wantErr: "wrong argument count"},
		{name: "start_unreachable", input: "idempotency {\nstart_unreachable\n}", want: `{"start_unreachable":true}`},
		{name: "start_unreachable false", input: "idempotency {\nstart_unreachable false\n}", want: `{}`},
		{name: "start_unreachable with a word", input: "idempotency {\nstart_unreachable yes\n}", wantErr: "start_unreachable: want no value, true or false"},
		{name: "require_key with a bad value", input: "idempotency {\nrequire_key yes\n}", wantErr: `require_key: "yes" is not a boolean`},
		{name: "require_key with two values", input: "idempotency {\nrequire_key true false\n}", wantErr: "wrong argument count"},
		{name: "old name of key_header", input: "idempotency {\nheader X-Key\n}", wantErr: `unknown subdirective "header"`},
		{name: "store without kind", input: "idempotency {\nstore\n}", wantErr: "wrong argument count"},
		{name: "unknown store", input: "idempotency {\nstore mysql\n}", wantErr: `unknown store "mysql"`},
		{name: "redis without URL", input: "idempotency {\nstore redis\n}", wantErr: "missing the Redis URL"},
		{name: "redis allow_eviction", input: "idempotency {\nstore redis redis://h:1 {\nallow_eviction\n}\n}", want: `{"store":{"type":"redis","url":"redis://h:1","allow_eviction":true}}`},
		{name: "redis wait_replicas", input: "idempotency {\nstore redis redis://h:1 {\nwait_replicas 1\nwait_timeout 100ms\n}\n}", want: `{"store":{"type":"redis","url":"redis://h:1","wait_replicas":1,"wait_timeout":"100ms"}}`},
		{name: "wait_replicas negative", input: "idempotency {\nstore redis redis://h:1 {\nwait_replicas -1\n}\n}", wantErr: "wait_replicas: must not be negative"},
		{name: "wait_timeout zero", input: "idempotency {\nstore redis redis://h:1 {\nwait_timeout 0s\n}\n}", wantErr: "wait_timeout: must be at least 1ms"},
		{name: "allow_eviction with a value", input: "idempotency {\nstore redis redis://h:1 {\nallow_eviction yes\n}\n}", wantErr: `allow_eviction: "yes" is not a boolean`},
		{name: "prefix without a value", input: "idempotency {\nstore redis redis://h:1 {\nprefix\n}\n}", wantErr: "prefix: takes one value"},
		{name: "postgres", input: "idempotency {\nstore postgres postgres://u:pw@db/app {\ntable idem.records\ncreate_schema false\nsweep_interval 30s\n}\n}",
			want: `{"store":{"type":"postgres","url":"postgres://u:pw@db/app","table":"idem.records","create_schema":false,"sweep_interval":"30s"}}`},
		{name: "postgres URL alone", input: "idempotency {\nstore postgresql://db/app\n}", want: `{"store":{"type":"postgres","url":"postgresql://db/app"}}`},
		{name: "postgres sweep off", input: "idempotency {\nstore postgres postgres://db/app {\nsweep_interval 0\ncreate_schema\n}\n}", want: `{"store":{"type":"postgres","url":"postgres://db/app","sweep_interval":"0s"}}`},
		{name: "postgres without URL", input: "idempotency {\nstore postgres\n}", wantErr: "missing the PostgreSQL URL"},
		{name: "postgres bad table", input: "idempotency {\nstore postgres postgres://db/app {\ntable a;b\n}\n}", wantErr: "table: postgres table"},
		{name: "postgres bad create_schema", input: "idempotency {\nstore postgres postgres://db/app {\ncreate_schema maybe\n}\n}", wantErr: `create_schema: "maybe" is not a boolean`},
		{name: "postgres bad sweep", input: "idempotency {\nstore postgres postgres://db/app {\nsweep_interval -1s\n}\n}", wantErr: "sweep_interval: \"-1s\": must not be negative"},
		{name: "postgres synchronous_commit", input: "idempotency {\nstore postgres postgres://db/app {\nsynchronous_commit off\n}\n}", want: `{"store":{"type":"postgres","url":"postgres://db/app","synchronous_commit":"off"}}`},
		{name: "postgres bad synchronous_commit", input: "idempotency {\nstore postgres postgres://db/app {\nsynchronous_commit never\n}\n}", wantErr: `synchronous_commit: want one of on, off, local, remote_write, remote_apply`},
		{name: "unknown postgres option", input: "idempotency {\nstore postgres postgres://db/app {\nprefix x\n}\n}", wantErr: `unknown postgres store option "prefix"`},
		{name: "unknown redis option", input: "idempotency {\nstore redis redis://h:1 {\n db 2\n}\n}", wantErr: `unknown redis store option "db"`},
		{name: "unknown memory option", input: "idempotency {\nstore memory {\n size 2\n}\n}", wantErr: `unknown memory store option "size"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(&h)
			if !jsonEqual(t, got, []byte(tc.want)) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func TestValidate(t *testing.T) {
	// with is a handler whose Config sets each setting from its text, as the
	// Caddyfile does; a setting's values follow its name, until the next "=".
	with := func(kv ...string) Handler {
		var h Handler
		for len(kv) > 0 {
			name, args := kv[0], kv[1:]
			n := 0
			for n < len(args) && args[n] != "=" {
				n++
			}
			if err := h.Config.Set(name, args[:n]...); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			kv = args[min(n+1, len(args)):]
		}
		return h
	}
	for name, tc := range map[string]struct {
		h    Handler
		want string
	}{
		"zero lock":            {with("lock_ttl", "0s"), "lock_ttl: must be at least 3ms"},
		"zero ttl":             {with("ttl", "0s"), "ttl: must be positive"},
		"lower-case":           {with("methods", "post"), "write methods in upper case, POST"},
		"no methods":           {with("methods"), "methods: no tracked methods"},
		"wait + in-flight":     {with("wait", "1s", "=", "in_flight_only"), "in_flight_only"},
		"webhook secret unset": {with("webhook", "stripe", "=", "webhook_secrets", "env:IDEMPROXY_TEST_UNSET"), "webhook_secrets: env:IDEMPROXY_TEST_UNSET: the variable is not set or empty"},
		"unknown preset":       {with("webhook", "svix", "=", "webhook_secrets", "env:HOME"), "webhook: \"svix\": want standard, stripe, github or hmac"},
		"zero tolerance":       {with("webhook", "stripe", "=", "webhook_secrets", "env:HOME", "=", "webhook_tolerance", "0s"), "webhook_tolerance: must be positive, got 0s"},
		"bad error format":     {with("error_format", "xml"), "error_format: \"xml\""},
		"header with a preset": {with("webhook", "github", "=", "webhook_secrets", "env:HOME", "=", "key_source", "header"), "key_source: header"},
		"stray webhook secret": {with("webhook_secrets", "env:HOME"), "webhook_secrets: applies when webhook is set"},
		"unknown fingerprint":  {with("fingerprint", "xml"), "fingerprint: \"xml\": want bytes, json, form or multipart"},
		"bad ignored pointer":  {with("fingerprint", "json", "=", "fingerprint_ignore", "request_time"), "fingerprint_ignore: \"request_time\" is not a JSON pointer"},
		"ignore with bytes":    {with("fingerprint_ignore", "/a"), "fingerprint_ignore: the bytes reading leaves nothing out"},
		"webhook fingerprint":  {with("webhook", "stripe", "=", "webhook_secrets", "env:HOME", "=", "fingerprint", "json"), "fingerprint: a webhook route leaves its body out"},
		"reconcile":            {with("reconcile", "GET /charges/{key}"), "reconcile is the standalone proxy's"},
	} {
		err := tc.h.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", name, err, tc.want)
		}
	}
	if err := (&Handler{}).Validate(); err != nil {
		t.Errorf("zero handler: %v", err)
	}
	if err := storeModule(t, "redis").Validate(); err == nil {
		t.Error("redis store without URL accepted")
	}
}
