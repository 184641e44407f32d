package dynamostore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/logging"

	"github.com/idemproxy/idemproxy/cache"
)

// The AWS SDK's warnings reach Env.Warn with their operation; its debug lines,
// and the checksum it compares with 0 when DynamoDB Local sends none, do not.
func TestSDKLogger(t *testing.T) {
	var got []string
	var l logging.Logger = sdkLogger{warn: func(msg string, args ...any) { got = append(got, fmt.Sprintf("%s %v", msg, args)) }}
	l = l.(logging.ContextLogger).WithContext(awsmiddleware.SetOperationName(context.Background(), "PutItem"))
	l.Logf(logging.Warn, "clock skew of %s corrected", "3s")
	l.Logf(logging.Debug, "request sent")
	l.Logf(logging.Warn, "failed to close HTTP response body, this may affect connection reuse: %v",
		"response did not match expected checksum, 0, 2080965641")
	l.Logf(logging.Warn, "failed to close HTTP response body, this may affect connection reuse: %v",
		"response did not match expected checksum, 17, 2080965641")
	if len(got) != 2 || got[0] != "dynamodb: AWS SDK: clock skew of 3s corrected [operation PutItem]" || !strings.Contains(got[1], "checksum, 17,") {
		t.Fatalf("warnings: %q", got)
	}
}

// The core's store_timeout bounds each DynamoDB request (the store then
// bounds its requests itself, and the core gives Complete no overall
// deadline); without one, the store's default applies.
func TestDynamoDBRequestTimeout(t *testing.T) {
	d := DefaultSettings()
	if got := d.options(cache.Env{StoreTimeout: 2 * time.Second}).RequestTimeout; got != 2*time.Second {
		t.Fatalf("RequestTimeout = %v, want the store_timeout 2s", got)
	}
	if got := d.options(cache.Env{}).RequestTimeout; got != 0 {
		t.Fatalf("RequestTimeout = %v without a store_timeout, want 0 (dynamostore's default)", got)
	}
}
