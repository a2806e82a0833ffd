package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	gcstorage "cloud.google.com/go/storage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/gcsx"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// gs:// paths go to cloud.google.com/go/storage directly rather than through Beam's gcs
// filesystem: Beam's makes a client per call, retries without a word until its context
// ends (and the toolkit's contexts do not end), and panics when it cannot make one. Here
// every operation is a gcsOp: bounded by Wait without progress, one log line per retry, and
// one line naming the endpoint and the cause when it gives up.

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
}

func (e *Error) Error() string {
	if e.Stalled > 0 {
		return fmt.Sprintf("%s %s: no progress from GCS at %s for %s (%d attempts; --storage-timeout or %s allow longer): %s",
			e.Op, e.Path, e.Endpoint, e.Stalled, e.Attempts, WaitEnv, oneLine(e.Err))
	}
	return fmt.Sprintf("%s %s: GCS at %s: %s", e.Op, e.Path, e.Endpoint, oneLine(e.Err))
}

func (e *Error) Unwrap() error { return e.Err }

// oneLine renders err in one line; a googleapi.Error's own text spans several.
func oneLine(err error) string {
	if err == nil {
		return "no answer"
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		msg := ge.Message
		if msg == "" {
			msg = strings.TrimSpace(string(ge.Body))
		}
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return strings.Join(strings.Fields(fmt.Sprintf("HTTP %d: %s", ge.Code, msg)), " ")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL repeats the endpoint and the path, which the message names
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// gcsEndpoint names where gs:// requests go, for messages.
func gcsEndpoint() string {
	if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
		return h
	}
	return "storage.googleapis.com"
}

// errStalled is the cause of an operation's context when its wait ran out.
var errStalled = errors.New("no progress within the storage wait")

// gcsOp is one operation on a gs:// path. Its context is cancelled when the operation is
// armed (waiting on the network) for Wait without progress; time spent outside (a producer
// preparing the next bytes of an upload, a consumer working on what it read) does not count.
type gcsOp struct {
	what, path, endpoint string
	bound                time.Duration
	ctx                  context.Context
	cancel               context.CancelCauseFunc

	mu       sync.Mutex
	timer    *time.Timer
	armed    int
	attempts int
	last     error // the last error a retry followed
}

func startGCS(ctx context.Context, what, p string) *gcsOp {
	op := &gcsOp{what: what, path: p, endpoint: gcsEndpoint(), bound: Wait()}
	op.ctx, op.cancel = context.WithCancelCause(ctx)
	return op
}

// arm starts (or nests) a wait on the network.
func (op *gcsOp) arm() {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.armed++
	if op.armed == 1 {
		op.timer = time.AfterFunc(op.bound, func() { op.cancel(errStalled) })
	}
}

func (op *gcsOp) disarm() {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.armed--
	if op.armed == 0 && op.timer != nil {
		op.timer.Stop()
	}
}

// progress restarts the wait: bytes moved.
func (op *gcsOp) progress() {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.armed > 0 && op.timer != nil {
		op.timer.Reset(op.bound)
	}
}

func (op *gcsOp) done() {
	op.mu.Lock()
	if op.timer != nil {
		op.timer.Stop()
	}
	op.mu.Unlock()
	op.cancel(context.Canceled)
}

// retry is the client's retry decision, with a log line for each retry it takes. Uploads
// are retried too (RetryAlways): an object becomes visible only when its upload completes,
// so repeating one cannot expose a partial object.
func (op *gcsOp) retry(err error) bool {
	if op.ctx.Err() != nil || !gcstorage.ShouldRetry(err) {
		return false
	}
	op.mu.Lock()
	op.attempts++
	op.last = err
	n := op.attempts
	op.mu.Unlock()
	slog.Warn("storage: retrying", "op", op.what, "path", op.path, "endpoint", op.endpoint,
		"attempt", n+1, "after", oneLine(err), "gives_up_after", op.bound.String()+" without progress")
	return true
}

func (op *gcsOp) retryOptions() []gcstorage.RetryOption {
	return []gcstorage.RetryOption{
		gcstorage.WithPolicy(gcstorage.RetryAlways),
		gcstorage.WithErrorFunc(op.retry),
	}
}

// fail turns err into an *Error (nil stays nil; an *Error passes unchanged).
func (op *gcsOp) fail(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	e := &Error{Op: op.what, Path: op.path, Endpoint: op.endpoint, Err: err}
	op.mu.Lock()
	e.Attempts, e.Stalled = op.attempts+1, 0
	last := op.last
	op.mu.Unlock()
	if errors.Is(context.Cause(op.ctx), errStalled) {
		e.Stalled = op.bound
		e.Err = last
		if last == nil {
			e.Err = errStalled
		}
	}
	return e
}

// object returns p's handle with op's retry policy.
func (op *gcsOp) object() (*gcstorage.ObjectHandle, error) {
	bucket, object, err := gcsx.ParseObject(op.path)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", op.path, err)
	}
	client, err := newGCSClient(op.ctx)
	if err != nil {
		return nil, op.fail(err)
	}
	return client.Bucket(bucket).Object(object).Retryer(op.retryOptions()...), nil
}

// gcsClients holds one storage client per STORAGE_EMULATOR_HOST value for the whole process:
// a client owns a connection pool and credentials (on GCE, such as Dataflow's workers, a new
// one fetches a token from the metadata server), and the pipelines open files one by one (the
// preprocess pipeline re-reads every image file by path). Keying by the variable keeps tests
// that start their own emulators apart. Clients are safe for concurrent use and never closed.
var gcsClients sync.Map

// newGCSClient returns the process's client: application default credentials, falling back
// to unauthenticated access as Beam's own gcs filesystem does; both honour
// STORAGE_EMULATOR_HOST. The context only bounds the client's creation.
func newGCSClient(ctx context.Context) (*gcstorage.Client, error) {
	key := os.Getenv("STORAGE_EMULATOR_HOST")
	if c, ok := gcsClients.Load(key); ok {
		return c.(*gcstorage.Client), nil
	}
	// Not the caller's context: the client outlives this call.
	c, err := gcstorage.NewClient(context.WithoutCancel(ctx), option.WithScopes(gcstorage.ScopeReadWrite))
	if err != nil {
		if c, err = gcstorage.NewClient(context.WithoutCancel(ctx), option.WithoutAuthentication()); err != nil {
			return nil, err
		}
	}
	if prev, loaded := gcsClients.LoadOrStore(key, c); loaded {
		c.Close()
		return prev.(*gcstorage.Client), nil
	}
	return c, nil
}

// gcsAttrs returns p's attributes; a missing object is gcstorage.ErrObjectNotExist, wrapped.
func gcsAttrs(ctx context.Context, what, p string) (*gcstorage.ObjectAttrs, error) {
	op := startGCS(ctx, what, p)
	defer op.done()
	op.arm()
	defer op.disarm()
	obj, err := op.object()
	if err != nil {
		return nil, err
	}
	attrs, err := obj.Attrs(op.ctx)
	return attrs, op.fail(err)
}

func gcsExists(ctx context.Context, p string) (bool, error) {
	_, err := gcsAttrs(ctx, "checking", p)
	if errors.Is(err, gcstorage.ErrObjectNotExist) {
		return false, nil
	}
	return err == nil, err
}

func gcsRemove(ctx context.Context, p string) error {
	op := startGCS(ctx, "removing", p)
	defer op.done()
	op.arm()
	defer op.disarm()
	obj, err := op.object()
	if err != nil {
		return err
	}
	// A retried delete whose first attempt succeeded finds nothing: not an error either.
	if err := obj.Delete(op.ctx); err != nil && !errors.Is(err, gcstorage.ErrObjectNotExist) {
		return op.fail(err)
	}
	return nil
}

// createGCS writes p as one upload: the object becomes visible only when the upload
// completes, so an error cancels the upload instead of finishing it.
func createGCS(ctx context.Context, p string, write func(w io.Writer) error) error {
	op := startGCS(ctx, "writing", p)
	defer op.done()
	obj, err := op.object()
	if err != nil {
		return err
	}
	w := obj.NewWriter(op.ctx)
	w.ProgressFunc = func(int64) { op.progress() }
	if err := write(&gcsWriter{w: w, op: op}); err != nil {
		op.cancel(errAborted) // before Close: closing would commit a partial object
		_ = w.Close()
		var se *Error
		if errors.As(err, &se) {
			return err
		}
		return fmt.Errorf("writing %s: %w", p, err)
	}
	op.arm()
	err = w.Close()
	op.disarm()
	if err != nil {
		op.what = "committing"
		return op.fail(err)
	}
	return nil
}

// gcsWriter is armed while a write waits for the upload to take its bytes.
type gcsWriter struct {
	w  *gcstorage.Writer
	op *gcsOp
}

func (g *gcsWriter) Write(b []byte) (int, error) {
	g.op.arm()
	n, err := g.w.Write(b)
	g.op.disarm()
	return n, g.op.fail(err)
}

// gcsReader streams an object from off on, reopening it where it stopped after an error
// that retrying can cure (a dropped connection, a 5xx).
type gcsReader struct {
	op  *gcsOp
	obj *gcstorage.ObjectHandle
	off int64
	end int64 // -1: to the object's end
	r   *gcstorage.Reader
}

func openGCS(ctx context.Context, p string) (io.ReadCloser, error) {
	op := startGCS(ctx, "reading", p)
	obj, err := op.object()
	if err != nil {
		op.done()
		return nil, err
	}
	g := &gcsReader{op: op, obj: obj, end: -1}
	op.arm()
	defer op.disarm()
	if err := g.open(); err != nil { // so that a missing object fails at Open, as files do
		op.done()
		return nil, op.fail(err)
	}
	return g, nil
}

func (g *gcsReader) open() error {
	n := int64(-1)
	if g.end >= 0 {
		n = g.end - g.off
	}
	r, err := g.obj.NewRangeReader(g.op.ctx, g.off, n)
	if err != nil {
		return err
	}
	g.r = r
	return nil
}

func (g *gcsReader) Read(b []byte) (int, error) {
	g.op.arm()
	defer g.op.disarm()
	for {
		if g.r == nil {
			if err := g.open(); err != nil {
				return 0, g.op.fail(err)
			}
		}
		n, err := g.r.Read(b)
		g.off += int64(n)
		if n > 0 {
			g.op.progress()
		}
		if err == nil || errors.Is(err, io.EOF) {
			return n, err
		}
		g.r.Close()
		g.r = nil
		if n > 0 {
			return n, nil // the caller reads again; the reader reopens at the new offset
		}
		if !g.op.retry(err) {
			return 0, g.op.fail(err)
		}
		// The client backs off before reopening only when opening fails: pause here too,
		// so a connection that drops at once does not spin.
		select {
		case <-g.op.ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (g *gcsReader) Close() error {
	var err error
	if g.r != nil {
		err = g.r.Close()
	}
	g.op.done()
	return err
}

// gcsFile is random access to an object: each ReadAt is a ranged read, an operation of its
// own with its own wait.
type gcsFile struct {
	ctx  context.Context
	name string
	size int64
}

func openGCSFile(ctx context.Context, p string) (File, error) {
	attrs, err := gcsAttrs(ctx, "opening", p)
	if err != nil {
		return nil, err
	}
	return &gcsFile{ctx: ctx, name: p, size: attrs.Size}, nil
}

func (f *gcsFile) Size() int64 { return f.size }

// Close releases nothing: the client is shared (see gcsClients) and a ranged read holds no
// connection between calls.
func (f *gcsFile) Close() error { return nil }

func (f *gcsFile) ReadAt(b []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	n := int64(len(b))
	if off+n > f.size {
		n = f.size - off
	}
	op := startGCS(f.ctx, fmt.Sprintf("reading at %d", off), f.name)
	obj, err := op.object()
	if err != nil {
		op.done()
		return 0, err
	}
	g := &gcsReader{op: op, obj: obj, off: off, end: off + n}
	defer g.Close()
	got, err := io.ReadFull(g, b[:n])
	if err != nil {
		return got, op.fail(err)
	}
	if int64(got) < int64(len(b)) {
		return got, io.EOF
	}
	return got, nil
}

// listGCSObjects calls each with the name of every object under prefix (and, with a
// delimiter, only those directly under it).
func listGCSObjects(ctx context.Context, what, p, bucket, prefix, delim string, each func(name string)) error {
	op := startGCS(ctx, what, p)
	defer op.done()
	op.arm()
	defer op.disarm()
	client, err := newGCSClient(op.ctx)
	if err != nil {
		return op.fail(err)
	}
	it := client.Bucket(bucket).Retryer(op.retryOptions()...).Objects(op.ctx, &gcstorage.Query{Prefix: prefix, Delimiter: delim})
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return op.fail(err)
		}
		op.progress()
		if attrs.Name != "" {
			each(attrs.Name)
		}
	}
}

// gcsHasPrefix reports whether any object's name starts with the folder dir/.
func gcsHasPrefix(ctx context.Context, dir string) (bool, error) {
	bucket, prefix, err := gcsx.ParseObject(strings.TrimSuffix(dir, "/") + "/")
	if err != nil {
		return false, fmt.Errorf("parsing %s: %w", dir, err)
	}
	op := startGCS(ctx, "checking", dir)
	defer op.done()
	op.arm()
	defer op.disarm()
	client, err := newGCSClient(op.ctx)
	if err != nil {
		return false, op.fail(err)
	}
	it := client.Bucket(bucket).Retryer(op.retryOptions()...).Objects(op.ctx, &gcstorage.Query{Prefix: prefix})
	it.PageInfo().MaxSize = 1
	_, err = it.Next()
	if errors.Is(err, iterator.Done) {
		return false, nil
	}
	return err == nil, op.fail(err)
}

// listGCSGlob returns the gs:// paths matching glob, in which * and ? match within one path
// element, ** across elements, and [...] a class ([!...] negated), as Beam's gcs filesystem
// (and the Java and Python SDKs) match them.
func listGCSGlob(ctx context.Context, glob string) ([]string, error) {
	bucket, object, err := gcsx.ParseObject(glob)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", glob, err)
	}
	re, err := globRegexp(object)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", glob, err)
	}
	prefix := object
	if i := strings.IndexAny(object, "*?["); i >= 0 {
		prefix = object[:i]
	}
	var out []string
	err = listGCSObjects(ctx, "listing", glob, bucket, prefix, "", func(name string) {
		if re.MatchString(name) {
			out = append(out, "gs://"+bucket+"/"+name)
		}
	})
	return out, err
}

// globRegexp translates a GCS glob into an anchored regular expression.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	rs := []rune(glob)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			switch {
			case i+2 < len(rs) && rs[i+1] == '*' && rs[i+2] == '/':
				b.WriteString("(?:.*/)?")
				i += 2
			case i+1 < len(rs) && rs[i+1] == '*':
				b.WriteString(".*")
				i++
			default:
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			j := i + 1
			if j < len(rs) && rs[j] == '!' {
				j++
			}
			if j < len(rs) && rs[j] == ']' {
				j++
			}
			for j < len(rs) && rs[j] != ']' {
				j++
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("glob %q: unclosed [", glob)
			}
			class := string(rs[i+1 : j])
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// gcsRename copies from to to within the service and deletes from.
func gcsRename(ctx context.Context, from, to string) error {
	op := startGCS(ctx, "renaming", from)
	defer op.done()
	op.arm()
	defer op.disarm()
	src, err := op.object()
	if err != nil {
		return err
	}
	bucket, object, err := gcsx.ParseObject(to)
	if err != nil {
		return fmt.Errorf("renaming %s to %s: %w", from, to, err)
	}
	client, err := newGCSClient(op.ctx)
	if err != nil {
		return op.fail(err)
	}
	dst := client.Bucket(bucket).Object(object).Retryer(op.retryOptions()...)
	if _, err := dst.CopierFrom(src).Run(op.ctx); err != nil {
		return op.fail(err)
	}
	if err := src.Delete(op.ctx); err != nil && !errors.Is(err, gcstorage.ErrObjectNotExist) {
		return op.fail(err)
	}
	return nil
}
