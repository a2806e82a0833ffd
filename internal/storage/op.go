package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Error is a failed operation on remote storage: what was done to which path, at which
// endpoint, and why, in one line. Err is the cause (errors.Is sees through it).
type Error struct {
	Op       string // "reading", "writing", "listing", …
	Path     string
	Endpoint string
	Attempts int
	// Stalled is the wait that ran out with no progress; 0 when the cause itself ended the
	// operation (an answer that retrying cannot change).
	Stalled time.Duration
	Err     error

	service string             // the store, as messages name it ("GCS")
	explain func(error) string // the driver's one-line rendering of a cause
}

func (e *Error) Error() string {
	service, explain := e.service, e.explain
	if service == "" {
		service = "remote storage"
	}
	if explain == nil {
		explain = oneLine
	}
	if e.Stalled > 0 {
		return fmt.Sprintf("%s %s: no progress from %s at %s for %s (%d attempts; --storage-timeout or %s allow longer): %s",
			e.Op, e.Path, service, e.Endpoint, e.Stalled, e.Attempts, WaitEnv, explain(e.Err))
	}
	return fmt.Sprintf("%s %s: %s at %s: %s", e.Op, e.Path, service, e.Endpoint, explain(e.Err))
}

func (e *Error) Unwrap() error { return e.Err }

// oneLine renders err in one line.
func oneLine(err error) string {
	if err == nil {
		return "no answer"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// remote describes a store reached over the network.
type remote struct {
	service  string // for messages: "GCS"
	endpoint string
	// shouldRetry tells the errors that a retry can cure (a dropped connection, a 5xx).
	shouldRetry func(error) bool
	// explain renders a cause in one line, without what the message already names.
	explain func(error) string
}

// errStalled is the cause of an operation's context when its wait ran out.
var errStalled = errors.New("no progress within the storage wait")

// op is one operation of this package on one path, done by a driver. On a remote store its
// context is cancelled when the operation is armed (waiting on the network) for Wait
// without progress; time spent outside (a producer preparing the next bytes of an upload, a
// consumer working on what it read) does not count. fail words every error the same way,
// whatever the store.
type op struct {
	what, path string
	remote     *remote // nil: a local store, never watched
	// caller is the caller's context, for work that outlives the operation (the later reads
	// of a File it opened).
	caller context.Context
	bound  time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	timer    *time.Timer
	armed    int
	attempts int
	last     error // the last error a retry followed
}

func startOp(ctx context.Context, d driver, what, p string) *op {
	o := &op{what: what, path: p, remote: d.remote(), bound: Wait(), caller: ctx}
	o.ctx, o.cancel = context.WithCancelCause(ctx)
	return o
}

// arm starts (or nests) a wait on the network.
func (o *op) arm() {
	if o.remote == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed++
	if o.armed == 1 {
		o.timer = time.AfterFunc(o.bound, func() { o.cancel(errStalled) })
	}
}

func (o *op) disarm() {
	if o.remote == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed--
	if o.armed == 0 && o.timer != nil {
		o.timer.Stop()
	}
}

// progress restarts the wait: bytes moved.
func (o *op) progress() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.armed > 0 && o.timer != nil {
		o.timer.Reset(o.bound)
	}
}

func (o *op) done() {
	o.mu.Lock()
	if o.timer != nil {
		o.timer.Stop()
	}
	o.mu.Unlock()
	o.cancel(context.Canceled)
}

// retry decides whether to retry after err, with a log line for each retry it takes.
func (o *op) retry(err error) bool {
	if o.remote == nil || o.ctx.Err() != nil || !o.remote.shouldRetry(err) {
		return false
	}
	o.mu.Lock()
	o.attempts++
	o.last = err
	n := o.attempts
	o.mu.Unlock()
	slog.Warn("storage: retrying", "op", o.what, "path", o.path, "endpoint", o.remote.endpoint,
		"attempt", n+1, "after", o.remote.explain(err), "gives_up_after", o.bound.String()+" without progress")
	return true
}

// fail words err once for every store: "OP PATH: cause" for a local store, an *Error on a
// remote one. nil stays nil; an *Error (already worded) passes unchanged.
func (o *op) fail(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	if o.remote == nil {
		return &wordedError{op: o, msg: o.what + " " + o.path, err: err}
	}
	e := &Error{Op: o.what, Path: o.path, Endpoint: o.remote.endpoint, Err: err,
		service: o.remote.service, explain: o.remote.explain}
	o.mu.Lock()
	e.Attempts = o.attempts + 1
	last := o.last
	o.mu.Unlock()
	if errors.Is(context.Cause(o.ctx), errStalled) {
		e.Stalled = o.bound
		e.Err = last
		if last == nil {
			e.Err = errStalled
		}
	}
	return e
}

// wordedError is a local store's failure, worded "OP PATH: cause".
type wordedError struct {
	op  *op // the operation that worded it
	msg string
	err error
}

func (e *wordedError) Error() string { return e.msg + ": " + e.err.Error() }
func (e *wordedError) Unwrap() error { return e.err }

// worded reports whether err is already worded by o (or is an *Error, which names its path).
func (o *op) worded(err error) bool {
	var se *Error
	var we *wordedError
	return errors.As(err, &se) || errors.As(err, &we) && we.op == o
}

// run does one operation of a driver on p, armed throughout.
func run[T any](ctx context.Context, what, p string, f func(d driver, o *op) (T, error)) (T, error) {
	var zero T
	d, err := driverFor(p)
	if err != nil {
		return zero, err
	}
	o := startOp(ctx, d, what, p)
	defer o.done()
	o.arm()
	defer o.disarm()
	v, err := f(d, o)
	if err != nil {
		return zero, o.fail(err)
	}
	return v, nil
}
