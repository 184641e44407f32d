package dynamostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// CheckTable validates a table name as DynamoDB does: 3 to 255 letters,
// digits, underscores, hyphens and dots.
func CheckTable(name string) error {
	if !tableName.MatchString(name) {
		return fmt.Errorf("dynamodb table %q: want 3 to 255 letters, digits, '_', '-' or '.'", name)
	}
	return nil
}

// Definition is the table the store needs: its CreateTable input (key schema,
// on-demand billing) and the UpdateTimeToLive input that turns DynamoDB's
// deletion of expired items on.
type Definition struct {
	Create *dynamodb.CreateTableInput
	TTL    *dynamodb.UpdateTimeToLiveInput
}

// TableDefinition returns the definition of table.
func TableDefinition(table string) (Definition, error) {
	if err := CheckTable(table); err != nil {
		return Definition{}, err
	}
	return Definition{
		Create: &dynamodb.CreateTableInput{
			TableName: aws.String(table),
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
			},
			BillingMode: types.BillingModePayPerRequest,
		},
		TTL: &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(table),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(attrTTL),
				Enabled:       aws.Bool(true),
			},
		},
	}, nil
}

// Schema returns the table definition as the AWS CLI commands that create it
// (what `idemproxy migrate` prints): create-table and update-time-to-live with
// their JSON input, and the wait between them. The output runs as a shell script.
func Schema(table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	type attrDef struct {
		AttributeName string
		AttributeType string
	}
	type keyElem struct {
		AttributeName string
		KeyType       string
	}
	create, _ := json.Marshal(struct {
		TableName            string
		AttributeDefinitions []attrDef
		KeySchema            []keyElem
		BillingMode          string
	}{
		TableName:            table,
		AttributeDefinitions: []attrDef{{attrPK, "S"}, {attrSK, "S"}},
		KeySchema:            []keyElem{{attrPK, "HASH"}, {attrSK, "RANGE"}},
		BillingMode:          "PAY_PER_REQUEST",
	})
	ttl, _ := json.Marshal(struct {
		TableName               string
		TimeToLiveSpecification struct {
			AttributeName string
			Enabled       bool
		}
	}{TableName: table, TimeToLiveSpecification: struct {
		AttributeName string
		Enabled       bool
	}{attrTTL, true}})
	var b strings.Builder
	fmt.Fprintf(&b, "# The idemproxy DynamoDB table %s: key pk (S, hash) + sk (S, range), on-demand,\n", table)
	fmt.Fprintf(&b, "# with DynamoDB's deletion of expired items on the %s attribute (epoch seconds).\n", attrTTL)
	fmt.Fprintf(&b, "aws dynamodb create-table --cli-input-json '%s'\n", create)
	fmt.Fprintf(&b, "aws dynamodb wait table-exists --table-name %s\n", table)
	fmt.Fprintf(&b, "aws dynamodb update-time-to-live --cli-input-json '%s'\n", ttl)
	return b.String(), nil
}

// ensureTable checks that the table exists with this store's key schema,
// creating it first when it is missing and creation is on.
func (s *Store) ensureTable(ctx context.Context) error {
	desc, err := s.describe(ctx)
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing) && !s.opts.CreateTable:
		return fmt.Errorf("dynamostore: table %s does not exist in %s (create it with the commands `idemproxy migrate` prints, or turn table creation on)", s.table, s.where())
	case errors.As(err, &missing):
		if err := s.createTable(ctx); err != nil {
			return err
		}
		if desc, err = s.waitActive(ctx); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("dynamostore: reading table %s: %w", s.table, err)
	case desc.TableStatus != types.TableStatusActive:
		if desc, err = s.waitActive(ctx); err != nil {
			return err
		}
	}
	if err := checkKeySchema(desc); err != nil {
		return fmt.Errorf("dynamostore: table %s: %w", s.table, err)
	}
	if s.opts.Warn != nil {
		ttl, err := s.client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(s.table)})
		switch {
		case err != nil:
			s.opts.Warn("dynamostore: could not read the table's time to live setting", "table", s.table, "error", err)
		case ttl.TimeToLiveDescription == nil || ttl.TimeToLiveDescription.TimeToLiveStatus == types.TimeToLiveStatusDisabled ||
			ttl.TimeToLiveDescription.TimeToLiveStatus == types.TimeToLiveStatusDisabling:
			s.opts.Warn("dynamostore: the table's time to live is off: expired records are ignored but never deleted; turn it on for the "+attrTTL+" attribute",
				"table", s.table)
		case aws.ToString(ttl.TimeToLiveDescription.AttributeName) != attrTTL:
			s.opts.Warn("dynamostore: the table's time to live is on another attribute: records are never deleted",
				"table", s.table, "attribute", aws.ToString(ttl.TimeToLiveDescription.AttributeName), "want", attrTTL)
		}
	}
	return nil
}

func (s *Store) where() string {
	if s.region == "" {
		return "this account"
	}
	return "region " + s.region
}

func (s *Store) describe(ctx context.Context) (*types.TableDescription, error) {
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
	if err != nil {
		return nil, err
	}
	if out.Table == nil {
		return nil, errors.New("DescribeTable answered no table")
	}
	return out.Table, nil
}

// createTable creates the table and turns its TTL on. Instances starting
// together race to create it: ResourceInUseException means another won.
func (s *Store) createTable(ctx context.Context) error {
	def, err := TableDefinition(s.table)
	if err != nil {
		return err
	}
	_, err = s.client.CreateTable(ctx, def.Create)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: creating table %s: %w", s.table, err)
	}
	if _, err := s.waitActive(ctx); err != nil {
		return err
	}
	_, err = s.client.UpdateTimeToLive(ctx, def.TTL)
	var bad *types.ResourceInUseException
	if err != nil && !errors.As(err, &bad) && !strings.Contains(err.Error(), "already enabled") {
		return fmt.Errorf("dynamostore: turning time to live on for table %s: %w", s.table, err)
	}
	return nil
}

// waitActive polls until the table is ACTIVE (ctx bounds it).
func (s *Store) waitActive(ctx context.Context) (*types.TableDescription, error) {
	for {
		desc, err := s.describe(ctx)
		var missing *types.ResourceNotFoundException
		switch {
		case errors.As(err, &missing): // just created: not visible yet
		case err != nil:
			return nil, fmt.Errorf("dynamostore: waiting for table %s: %w", s.table, err)
		case desc.TableStatus == types.TableStatusActive:
			return desc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dynamostore: table %s not active: %w", s.table, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func checkKeySchema(desc *types.TableDescription) error {
	types_ := map[string]types.ScalarAttributeType{}
	for _, a := range desc.AttributeDefinitions {
		types_[aws.ToString(a.AttributeName)] = a.AttributeType
	}
	var hash, rng string
	for _, k := range desc.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rng = aws.ToString(k.AttributeName)
		}
	}
	if hash != attrPK || rng != attrSK || types_[attrPK] != types.ScalarAttributeTypeS || types_[attrSK] != types.ScalarAttributeTypeS {
		return fmt.Errorf("key schema is hash %q (%s), range %q (%s); an idemproxy table has hash %q (S) and range %q (S)",
			hash, types_[hash], rng, types_[rng], attrPK, attrSK)
	}
	return nil
}
