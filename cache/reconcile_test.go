package cache_test

import (
	"encoding/hex"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// A job stored before jobs kept the original's Host and send time still
// decodes, as a legacy job; a job with them keeps them.
func TestJobDecodesTheEarlierForm(t *testing.T) {
	at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	// cache.EncodeJob of this job by the version before Host, Sent and
	// NotFound were added.
	old, _ := hex.DecodeString("8aa172a82f63686172676573a16da3474554a175ae2f636861726765733f6b65793d6ba16881ad417574686f72697a6174696f6e91a84265617265722074a174cc01a16102a164d6ff72bd0c3ca16cd6ff72bd1a10a178d6ff72be5d80a173cd0194")
	j, err := cache.DecodeJob(old)
	if err != nil {
		t.Fatal(err)
	}
	want := &cache.Job{Route: "/charges", Method: "GET", URL: "/charges?key=k", Header: http.Header{"Authorization": {"Bearer t"}},
		State: cache.JobScheduled, Attempts: 2, Due: at.Add(time.Minute), Deadline: at.Add(time.Hour), Until: at.Add(24 * time.Hour), LastStatus: 404}
	if !j.Legacy() || !j.Due.Equal(want.Due) || !j.Until.Equal(want.Until) {
		t.Fatalf("decoded %+v, want a legacy job", j)
	}
	j.Due, j.Deadline, j.Until = want.Due, want.Deadline, want.Until // the same instants; DecodeJob's are local times
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("decoded %+v\nwant %+v", j, want)
	}

	want.Host, want.Sent, want.NotFound = "shop.example", at.Add(-time.Second), 1
	b, err := cache.EncodeJob(want)
	if err != nil {
		t.Fatal(err)
	}
	if j, err = cache.DecodeJob(b); err != nil || j.Legacy() || j.Host != "shop.example" || !j.Sent.Equal(want.Sent) || j.NotFound != 1 {
		t.Fatalf("round trip: %+v, %v", j, err)
	}
}
