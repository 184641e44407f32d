package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
)

// `store dynamodb <table> [{ … }]` and `store dynamodb://<table>`: the table and
// the settings of dynamostore.Settings, by name; bad ones refused by name.
func TestUnmarshalCaddyfileDynamoDB(t *testing.T) {
	for _, tc := range []struct {
		name, input, want, wantErr string
	}{
		{name: "table", input: "store dynamodb idem", want: `{"store":{"type":"dynamodb","table":"idem"}}`},
		{name: "URL alone", input: "store dynamodb://idem.records", want: `{"store":{"type":"dynamodb","table":"idem.records"}}`},
		{name: "URL after the kind", input: "store dynamodb dynamodb://idem", want: `{"store":{"type":"dynamodb","table":"idem"}}`},
		{name: "placeholder", input: "store dynamodb {env.IDEM_TABLE}", want: `{"store":{"type":"dynamodb","table":"{env.IDEM_TABLE}"}}`},
		{name: "every setting", input: "store dynamodb idem {\ncreate_table false\ninline_limit 1KiB\nmax_response 64MiB\n}",
			want: `{"store":{"type":"dynamodb","table":"idem","create_table":false,"inline_limit":1024,"max_response":67108864}}`},
		{name: "URL with a block", input: "store dynamodb://idem {\ninline_limit 300KiB\n}", want: `{"store":{"type":"dynamodb","table":"idem","inline_limit":307200}}`},
		{name: "defaults are left out", input: "store dynamodb idem {\ncreate_table\nmax_response 16MiB\n}", want: `{"store":{"type":"dynamodb","table":"idem"}}`},

		{name: "no table", input: "store dynamodb", wantErr: "missing the DynamoDB table"},
		{name: "bad table", input: "store dynamodb a/b", wantErr: `dynamodb table "a/b"`},
		{name: "short table", input: "store dynamodb://ab", wantErr: "3 to 255"},
		{name: "path after the table", input: "store dynamodb://idem/x", wantErr: "nothing after the table"},
		{name: "two tables", input: "store dynamodb a1 b2", wantErr: "wrong argument count"},
		{name: "unknown option", input: "store dynamodb idem {\nregion eu-west-1\n}", wantErr: `unknown dynamodb store option "region"`},
		{name: "inline_limit too large", input: "store dynamodb idem {\ninline_limit 1MiB\n}", wantErr: "inline_limit: must be between 1B and 300KiB"},
		{name: "max_response zero", input: "store dynamodb idem {\nmax_response 0B\n}", wantErr: "max_response: must be between 1B and 256MiB"},
		{name: "size without a unit", input: "store dynamodb idem {\ninline_limit 10\n}", wantErr: `inline_limit: "10" has no unit`},
		{name: "create_table with a bad value", input: "store dynamodb idem {\ncreate_table maybe\n}", wantErr: `create_table: "maybe" is not a boolean`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("idempotency {\n" + tc.input + "\n}"))
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

// The module's JSON: table and settings by name over the defaults, unknown
// members refused, the table required.
func TestDynamoDBStoreJSON(t *testing.T) {
	ds := storeModule(t, "dynamodb")
	if err := json.Unmarshal([]byte(`{"type":"dynamodb","table":"idem","create_table":false,"max_response":"32MiB"}`), ds); err != nil {
		t.Fatal(err)
	}
	if d := ds.Settings.(*dynamostore.Settings); ds.Location != "idem" || d.CreateTable || d.MaxResponse != 32<<20 {
		t.Fatalf("decoded %+v %+v", ds, d)
	}
	if err := json.Unmarshal([]byte(`{"table":"idem","url":"dynamodb://idem"}`), storeModule(t, "dynamodb")); err == nil || !strings.Contains(err.Error(), "url") {
		t.Fatalf("a url member: %v; want it refused", err)
	}
	if err := storeModule(t, "dynamodb").Validate(); err == nil || !strings.Contains(err.Error(), "table is required") {
		t.Fatalf("no table: %v", err)
	}
	m := storeModule(t, "dynamodb").CaddyModule().New().(*Store)
	m.Location = "{env.IDEMPROXY_TEST_DYNAMO_TABLE}"
	t.Setenv("IDEMPROXY_TEST_DYNAMO_TABLE", "x")
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("a placeholder replaced by a bad table: %v", err)
	}
}
