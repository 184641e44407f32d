package dynamostore

// Listing for operators (cache.Lister), by a paged Scan.

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Lister = (*Store)(nil)

// scanner is the one call List needs beyond Client (the SDK's client has it).
type scanner interface {
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// scansPerPage bounds the Scan calls of one page (each reads up to 1 MB of
// items), so a page ends, perhaps empty with a cursor, within about 8 MB read.
const scansPerPage = 8

// List implements cache.Lister with a Scan of the table whose filter keeps
// the live records (and, for q.Held, the held unknown outcomes; for
// q.Prefix, the keys that begin with it), projecting only their keys; each
// record listed is then read as Get reads it. The order is DynamoDB's.
//
// What it costs: a Scan reads every item of the table, whatever its filter
// keeps, at half a read capacity unit per 4 KB (eventually consistent):
// a complete listing of a table of 1 GB takes about 131,000 read request
// units, the same for a lookup by a key's leading digits, plus one
// strongly consistent GetItem per record listed. It needs the IAM action
// dynamodb:Scan, beyond those the store needs to serve.
func (s *Store) List(ctx context.Context, q cache.ListQuery) (cache.ListPage, error) {
	bc, _ := s.client.(boundedClient)
	sc, ok := bc.c.(scanner)
	if !ok {
		return cache.ListPage{}, fmt.Errorf("dynamostore: listing needs a client that can Scan (%T cannot)", bc.c)
	}
	start, err := parseScanCursor(q.Cursor)
	if err != nil {
		return cache.ListPage{}, err
	}
	now := ms(s.now())
	filter := "#sk = :r AND #ex > :now"
	values := map[string]types.AttributeValue{":r": avS(recordSK), ":now": avN(now)}
	if q.Held {
		filter += " AND (#unk = :t OR (#st = :fl AND #le <= :now))"
		values[":t"], values[":fl"] = avBool(true), avN(stateInFlight)
	}
	if q.Prefix != "" {
		filter += " AND begins_with(#pk, :p)"
		values[":p"] = avS(q.Prefix)
	}
	limit := q.ListLimit()
	var page cache.ListPage
	for scans := 0; scans < scansPerPage && len(page.Records) < limit; scans++ {
		in := &dynamodb.ScanInput{
			TableName:                 aws.String(s.table),
			FilterExpression:          aws.String(filter),
			ProjectionExpression:      aws.String("#pk"),
			ExpressionAttributeNames:  names(filter, "#pk"),
			ExpressionAttributeValues: values,
			ExclusiveStartKey:         start,
			ReturnConsumedCapacity:    s.rcc(),
		}
		rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		out, err := sc.Scan(rctx, in)
		cancel()
		if err != nil {
			return cache.ListPage{}, fmt.Errorf("dynamostore: listing: %w", err)
		}
		s.report("list", "Scan", out.ConsumedCapacity)
		for _, it := range out.Items {
			key, _ := item(it).s(attrPK)
			rec, err := s.Get(ctx, key)
			if err := q.Keep(&page, key, rec, err); err != nil {
				return cache.ListPage{}, err
			}
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			return page, nil
		}
	}
	pk, _ := item(start).s(attrPK)
	sk, _ := item(start).s(attrSK)
	page.Cursor = base64.RawURLEncoding.EncodeToString([]byte(pk)) + "." + base64.RawURLEncoding.EncodeToString([]byte(sk))
	return page, nil
}

// parseScanCursor reads a cursor List made: the last evaluated key's pk and
// sk, each in base64url.
func parseScanCursor(c string) (map[string]types.AttributeValue, error) {
	if c == "" {
		return nil, nil
	}
	a, b, ok := strings.Cut(c, ".")
	pk, err1 := base64.RawURLEncoding.DecodeString(a)
	sk, err2 := base64.RawURLEncoding.DecodeString(b)
	if !ok || err1 != nil || err2 != nil || len(pk) == 0 || len(sk) == 0 {
		return nil, fmt.Errorf("dynamostore: %w", cache.ErrBadCursor)
	}
	return itemKey(string(pk), string(sk)), nil
}
