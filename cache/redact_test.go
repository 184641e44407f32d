package cache_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
)

// RedactURL hides every secret a store URL can carry: the password of
// user:password@, and the query parameters and keyword/value (DSN) keywords
// that are passwords — PostgreSQL's password and sslpassword (pgx reads both
// from a URL's query and from a DSN), the password of a Redis Sentinel URL
// (go-redis ParseFailoverURL). Before, only user:password@ was hidden: the
// rest reached logs, the Caddy admin API's handler list and error messages.
func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"memory", "memory"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://u:hunter2@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://:hunter2@h:1/0", "redis://:xxxxx@h:1/0"},
		{"redis://h:6379/0?password=hunter2", "redis://h:6379/0?password=xxxxx"},
		{"redis://h:6379/0?dial_timeout=1s&password=hunter2&pool_size=5", "redis://h:6379/0?dial_timeout=1s&password=xxxxx&pool_size=5"},
		{"redis+sentinel://s1:26379/0?master_name=m&username=app&password=hunter2&addr=s2:26379",
			"redis+sentinel://s1:26379/0?master_name=m&username=app&password=xxxxx&addr=s2:26379"},
		{"rediss+sentinel://su:sentinelpw@s1:26379?master_name=m&password=hunter2", "rediss+sentinel://su:xxxxx@s1:26379?master_name=m&password=xxxxx"},
		{"redis://h:6379/0?Password=hunter2", "redis://h:6379/0?Password=xxxxx"},
		{"postgres://idem@db:5432/idem?password=hunter2&sslmode=disable", "postgres://idem@db:5432/idem?password=xxxxx&sslmode=disable"},
		{"postgres://idem:pw1@db/idem?sslmode=verify-full&sslkey=/k.pem&sslpassword=hunter2", "postgres://idem:xxxxx@db/idem?sslmode=verify-full&sslkey=/k.pem&sslpassword=xxxxx"},
		{"postgresql://db/idem?password=hun%26ter2", "postgresql://db/idem?password=xxxxx"},
		{"postgres://db/idem?password", "postgres://db/idem?password"}, // no value: nothing to hide
		{"dynamodb://idem", "dynamodb://idem"},
		// Keyword/value: pgx (and so the PostgreSQL store in Caddy) takes it.
		{"host=db user=idem password=hunter2 dbname=idem", "host=db user=idem password=xxxxx dbname=idem"},
		{"host=db password='hun ter2' sslpassword = hunter3 dbname=idem", "host=db password=xxxxx sslpassword = xxxxx dbname=idem"},
		{`host=db password='it\'s hunter2' dbname=idem`, "host=db password=xxxxx dbname=idem"},
		// Unparsable: the userinfo and the secret parameters are hidden all the same.
		{"redis://u:hun%zzter2@h:1/0?password=hunter2", "redis://xxxxx@h:1/0?password=xxxxx"},
	} {
		got := cache.RedactURL(c.in)
		if got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, secret := range []string{"hunter2", "hunter3", "hun ter2", "sentinelpw", "pw1"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) = %q: shows %q", c.in, got, secret)
			}
		}
	}
}

// RedactError hides the same secrets in an error that quotes the URL, or
// the secrets alone.
func TestRedactError(t *testing.T) {
	for _, c := range []struct{ url, secret string }{
		{"redis://u:hunter2@h:1/0", "hunter2"},
		{"redis://h:1/0?password=hunter2", "hunter2"},
		{"postgres://db/idem?sslpassword=hunter2", "hunter2"},
		{"postgres://db/idem?password=hunter2%21", "hunter2!"},
		{"host=db password=hunter2 dbname=idem", "hunter2"},
		{"host=db password='hunter2 x' dbname=idem", "hunter2 x"},
	} {
		err := cache.RedactError(fmt.Errorf("dialling %s: auth failed for %q", c.url, c.secret), c.url)
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("RedactError(…, %q) = %q: shows the password", c.url, err)
		}
	}
	plain := errors.New("connection refused")
	if got := cache.RedactError(plain, "redis://h:1/0?pool_size=5"); got != plain {
		t.Errorf("an error with no secret: %v, want it unchanged", got)
	}
}
