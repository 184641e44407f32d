package cache

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// JobState is where a reconcile job is in its life.
type JobState uint8

// Reconcile job states.
const (
	// JobScheduled: the job's next attempt is due at Job.Due.
	JobScheduled JobState = 1
	// JobExhausted: its attempts or its window ran out; the key stays held
	// for an operator, and the job is kept (Due is the hold's end) only to
	// show what was tried.
	JobExhausted JobState = 2
)

func (s JobState) String() string {
	switch s {
	case JobScheduled:
		return "scheduled"
	case JobExhausted:
		return "exhausted"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Job is the reconcile schedule of one held unknown outcome: the request that
// asks the upstream what became of the operation (rendered when the key was
// held, from the original request), and how far asking has come. It lives
// beside the held record, under the same store key.
//
// Host and Sent were added later: a job stored before has neither (Sent is
// zero, see Legacy), and decodes as such.
type Job struct {
	Route  string      `msgpack:"r"`           // the route whose rules settle it
	Method string      `msgpack:"m"`           // the reconcile request's method
	URL    string      `msgpack:"u"`           // its path and query, on the upstream
	Header http.Header `msgpack:"h,omitempty"` // the headers copied from the original request, and the forwarding headers it carried
	// Host is the Host the original request was addressed to, in canonical
	// form (middleware.CanonicalHost): the reconcile request's Host is
	// decided from it as the original's was (the proxy's upstream_host).
	Host string `msgpack:"o,omitempty"`
	// Sent is when the original request was sent upstream: a not-found
	// answer settles nothing before it can no longer be running.
	Sent time.Time `msgpack:"z,omitempty"`

	State    JobState  `msgpack:"t"`
	Attempts int       `msgpack:"a"`
	Due      time.Time `msgpack:"d"` // next attempt (scheduled), or when the job is dropped (exhausted)
	Deadline time.Time `msgpack:"l"` // no attempt starts after it
	Until    time.Time `msgpack:"x"` // the hold's end: the job is dropped then

	NotFound   int    `msgpack:"n,omitempty"` // not-found answers since the original could no longer be running
	LastStatus int    `msgpack:"s,omitempty"` // the last answer's status, 0 when none came
	LastError  string `msgpack:"e,omitempty"` // why the last attempt got no answer
}

// Legacy reports whether j was stored before jobs kept the original's Host
// and send time: it has neither.
func (j *Job) Legacy() bool { return j.Sent.IsZero() }

// EncodeJob and DecodeJob are a job's stored form; bad input wraps ErrCorrupt.
func EncodeJob(j *Job) ([]byte, error) {
	b, err := msgpack.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encoding reconcile job: %w", err)
	}
	return b, nil
}

// DecodeJob is the inverse of EncodeJob.
func DecodeJob(b []byte) (*Job, error) {
	j := new(Job)
	if err := msgpack.Unmarshal(b, j); err != nil {
		return nil, fmt.Errorf("%w: reconcile job: %v", ErrCorrupt, err)
	}
	if j.State != JobScheduled && j.State != JobExhausted {
		return nil, fmt.Errorf("%w: reconcile job state %d", ErrCorrupt, j.State)
	}
	return j, nil
}

// Reconciler is implemented by stores that keep reconcile jobs: an index of
// held unknown outcomes by when they are next due, from which any instance
// sharing the store claims the next one. A claim is a claim fenced by its
// token, so one instance at a time works on a job, and a job whose instance
// died is claimed again when its claim lapses. Times are the caller's clock:
// instances sharing a store must agree on time to well within a claim.
type Reconciler interface {
	// ScheduleReconcile stores job under key (replacing any job there, and
	// any claim on it), due at job.Due.
	ScheduleReconcile(ctx context.Context, key string, job *Job) error

	// ClaimReconcile claims the job due first, if one is due at now: it
	// moves the job's due time to now+lease (so a claimer that dies lets it
	// come back) and fences it with token, and returns its key and the job as
	// scheduled. It returns ErrNotFound when none is due. Pick and claim are
	// one atomic step across every instance.
	ClaimReconcile(ctx context.Context, now time.Time, token string, lease time.Duration) (key string, job *Job, err error)

	// UpdateReconcile replaces the claimed job under key with job, due at
	// job.Due, and ends the claim. It fails with ErrClaimLost unless token
	// still holds the claim.
	UpdateReconcile(ctx context.Context, key, token string, job *Job) error

	// FinishReconcile deletes the claimed job under key. It fails with
	// ErrClaimLost unless token still holds the claim.
	FinishReconcile(ctx context.Context, key, token string) error

	// GetReconcile returns the job under key, or ErrNotFound. For operators.
	GetReconcile(ctx context.Context, key string) (*Job, error)
}
