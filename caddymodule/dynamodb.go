package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/internal/stores"
)

type pooledDynamoDB struct {
	*dynamostore.Store
	*pooled
}

// DynamoDBStore keeps records in a DynamoDB table, shared by every instance
// pointing at it. Region, credentials and endpoint come from the Caddy
// process's AWS environment (AWS_REGION, AWS_PROFILE,
// AWS_ENDPOINT_URL_DYNAMODB, the shared config files, instance and container
// roles).
type DynamoDBStore struct {
	// The table: 3 to 255 letters, digits, '_', '-' or '.'. Placeholders such
	// as {env.IDEM_TABLE} are replaced. Required.
	Table string `json:"table,omitempty"`
	// The store's settings: create_table, inline_limit, max_response
	// (internal/stores.DynamoDB).
	stores.DynamoDB

	key   string
	store *pooledDynamoDB
}

// CaddyModule returns the Caddy module information.
func (*DynamoDBStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.dynamodb",
		New: func() caddy.Module { return &DynamoDBStore{DynamoDB: stores.DefaultDynamoDB()} },
	}
}

// UnmarshalJSON reads the module's table and settings over their defaults.
func (ds *DynamoDBStore) UnmarshalJSON(b []byte) error {
	return decodeStore("dynamodb", b, &ds.DynamoDB, &ds.Table)
}

// MarshalJSON writes the table and the settings that differ from their defaults.
func (ds DynamoDBStore) MarshalJSON() ([]byte, error) {
	def := stores.DefaultDynamoDB()
	return encodeStore("dynamodb", &ds.DynamoDB, &def, ds.Table)
}

// url is the store's dynamodb://TABLE, placeholders replaced.
func (ds *DynamoDBStore) url() string {
	return "dynamodb://" + caddy.NewReplacer().ReplaceAll(ds.Table, "")
}

// Provision opens the table (creating it when missing and create_table), or
// reuses the store of the previous config: one store per table and settings,
// kept across reloads. Like PostgreSQL, a DynamoDB that does not answer fails
// the config (a reload keeps the running one).
func (ds *DynamoDBStore) Provision(ctx caddy.Context) error {
	if err := ds.Validate(); err != nil {
		return err
	}
	url := ds.url()
	ds.key = stores.Settings{DynamoDB: ds.DynamoDB}.Key(url)
	v, _, err := pool.LoadOrNew(ds.key, func() (caddy.Destructor, error) {
		s, closeFn, err := ds.DynamoDB.Open(ctx, url, stores.Env{Warn: ctx.Slogger().Warn})
		if err != nil {
			return nil, err
		}
		return pooledDynamoDB{Store: s, pooled: &pooled{close: closeFn}}, nil
	})
	if err != nil {
		return fmt.Errorf("dynamodb store: %w", err)
	}
	pd := v.(pooledDynamoDB)
	ds.store = &pd
	return nil
}

// Validate implements caddy.Validator.
func (ds *DynamoDBStore) Validate() error {
	if ds.Table == "" {
		return fmt.Errorf("dynamodb store: table is required")
	}
	return ds.DynamoDB.Validate(ds.url())
}

// Cleanup releases this config's use of the store; it closes when no config and
// no request uses it.
func (ds *DynamoDBStore) Cleanup() error {
	_, err := pool.Delete(ds.key)
	return err
}

// IdempotencyStore implements StoreModule.
func (ds *DynamoDBStore) IdempotencyStore() cache.Store { return ds.store }

// Interface guards.
var (
	_ caddy.Provisioner  = (*DynamoDBStore)(nil)
	_ caddy.Validator    = (*DynamoDBStore)(nil)
	_ caddy.CleanerUpper = (*DynamoDBStore)(nil)
	_ StoreModule        = (*DynamoDBStore)(nil)
	_ cache.Holder       = (*pooledDynamoDB)(nil)
	_ cache.Notifier     = (*pooledDynamoDB)(nil)
	// Each request bounded by the store (5 s): a large response's
	// completion is not bounded as a whole.
	_ cache.RequestBounded = (*pooledDynamoDB)(nil)
)
