package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// maxIdentifier is PostgreSQL's limit on an identifier, a channel's name
// included (NAMEDATALEN-1 bytes): LISTEN truncates a longer one, NOTIFY
// refuses it.
const maxIdentifier = 63

// channelName is the LISTEN/NOTIFY channel of the table schema.relname, as the
// catalog names it: every spelling of one table (bare or schema-qualified)
// shares it, and it is 26 bytes whatever the names' lengths.
func channelName(schema, relname string) string {
	sum := sha256.Sum256([]byte(schema + "." + relname))
	return "idemproxy_" + hex.EncodeToString(sum[:8])
}

// legacyChannels are the channels versions before channelName announced on
// and listened to: "idemproxy_" and the table as configured, its dot an
// underscore, which for one table is one of two names. Those that fit an
// identifier are kept: a store listens on them too, and announces deletes and
// resolves on them, so that during a rolling upgrade the local caches of
// either version hear each other's. (Completes and releases for waiters go to
// the new channel only: a waiter of the earlier version learns of them at its
// next poll, and a listener would hear each one once per channel.)
func legacyChannels(schema, relname string) []string {
	var out []string
	for _, name := range []string{"idemproxy_" + relname, "idemproxy_" + schema + "_" + relname} {
		if len(name) <= maxIdentifier {
			out = append(out, name)
		}
	}
	return out
}

// resolveChannels looks the table up in the catalog (it exists: New checked)
// and sets the store's channels from its schema and name.
func (s *Store) resolveChannels(ctx context.Context) error {
	var schema, relname string
	err := s.pool.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1::text::regclass`, pgx.Identifier(strings.Split(s.table, ".")).Sanitize()).Scan(&schema, &relname)
	if err != nil {
		return fmt.Errorf("pgstore: looking up table %s: %w", s.table, err)
	}
	s.channel = channelName(schema, relname)
	s.channels = append([]string{s.channel}, legacyChannels(schema, relname)...)
	s.announceOwn, s.announceAll = s.channels[:1], s.channels
	return nil
}
