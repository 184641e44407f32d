package dynamostore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/middleware"
)

// A Go service on DynamoDB. Open reads the region, credentials and endpoint
// from the standard AWS chain (AWS_REGION, AWS_PROFILE,
// AWS_ENDPOINT_URL_DYNAMODB, instance roles), and creates the table when it is
// missing, so a table that cannot be reached fails here rather than at the
// first request.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := dynamostore.Open(ctx, "idem_records", dynamostore.Options{CreateTable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.RequireKey = true })
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", idem.Wrap(http.NotFoundHandler())))
}

// The table's definition as AWS CLI commands (what `idemproxy migrate` prints).
func ExampleSchema() {
	text, err := dynamostore.Schema("idem_records")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(text)
	// Output:
	// # The idemproxy DynamoDB table idem_records: key pk (S, hash) + sk (S, range), on-demand,
	// # with DynamoDB's deletion of expired items on the ttl attribute (epoch seconds).
	// aws dynamodb create-table --cli-input-json '{"TableName":"idem_records","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"},{"AttributeName":"sk","AttributeType":"S"}],"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"},{"AttributeName":"sk","KeyType":"RANGE"}],"BillingMode":"PAY_PER_REQUEST"}'
	// aws dynamodb wait table-exists --table-name idem_records
	// aws dynamodb update-time-to-live --cli-input-json '{"TableName":"idem_records","TimeToLiveSpecification":{"AttributeName":"ttl","Enabled":true}}'
}
