package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	gcstorage "cloud.google.com/go/storage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/gcsx"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// gcsDriver stores gs:// objects through cloud.google.com/go/storage directly rather than
// through Beam's gcs filesystem: Beam's makes a client per call, retries without a word until
// its context ends (and the toolkit's contexts do not end), and panics when it cannot make
// one. Here the client's retries go through the op (one log line each) and its waits are
// armed, so an operation without progress for Wait gives up with one line naming the
// endpoint and the cause. An object becomes visible only when its upload completes, so a
// write needs no temporary name: an aborted upload is cancelled, never finalised.
type gcsDriver struct{}

func (gcsDriver) syntax() pathSyntax { return urlPaths{} }

func (gcsDriver) remote() *remote {
	return &remote{service: "GCS", endpoint: gcsEndpoint(), shouldRetry: gcstorage.ShouldRetry, explain: explainGCS}
}

// explainGCS renders err in one line; a googleapi.Error's own text spans several.
func explainGCS(err error) string {
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
	return oneLine(err)
}

// gcsEndpoint names where gs:// requests go, for messages.
func gcsEndpoint() string {
	if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
		return h
	}
	return "storage.googleapis.com"
}

// notExist is a missing object: errors.Is sees fs.ErrNotExist in it, as in a missing local
// file, and the message stays the client's.
type notExist struct{ error }

func (e notExist) Is(target error) bool { return target == fs.ErrNotExist }
func (e notExist) Unwrap() error        { return e.error }

func gcsNotExist(err error) error {
	if errors.Is(err, gcstorage.ErrObjectNotExist) {
		return notExist{err}
	}
	return err
}

// retryOptions retry uploads too (RetryAlways): an object becomes visible only when its
// upload completes, so repeating one cannot expose a partial object.
func retryOptions(o *op) []gcstorage.RetryOption {
	return []gcstorage.RetryOption{
		gcstorage.WithPolicy(gcstorage.RetryAlways),
		gcstorage.WithErrorFunc(o.retry),
	}
}

// bucket returns the handle of p's bucket with o's retry policy, and the object name of p.
func bucket(o *op, p string) (*gcstorage.BucketHandle, string, error) {
	b, object, err := gcsx.ParseObject(p)
	if err != nil {
		return nil, "", fmt.Errorf("parsing %s: %w", p, err)
	}
	client, err := newGCSClient(o.ctx)
	if err != nil {
		return nil, "", err
	}
	return client.Bucket(b).Retryer(retryOptions(o)...), object, nil
}

// object returns p's handle with o's retry policy.
func object(o *op, p string) (*gcstorage.ObjectHandle, error) {
	b, name, err := bucket(o, p)
	if err != nil {
		return nil, err
	}
	return b.Object(name).Retryer(retryOptions(o)...), nil
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

func (gcsDriver) size(o *op, name string) (int64, error) {
	if _, object, err := gcsx.ParseObject(name); err == nil && object == "" {
		return 0, notExist{fmt.Errorf("a bucket's root is no object")}
	}
	obj, err := object(o, name)
	if err != nil {
		return 0, err
	}
	attrs, err := obj.Attrs(o.ctx)
	if err != nil {
		return 0, gcsNotExist(err)
	}
	return attrs.Size, nil
}

func (gcsDriver) open(o *op, name string) (io.ReadCloser, error) {
	obj, err := object(o, name)
	if err != nil {
		return nil, err
	}
	g := &gcsReader{op: o, obj: obj, end: -1}
	if err := g.open(); err != nil { // so that a missing object fails at Open, as files do
		return nil, gcsNotExist(err)
	}
	return g, nil
}

// newRangeReader reads n bytes of name from off, for rangedFile; it connects on the first
// Read.
func (gcsDriver) newRangeReader(o *op, name string, off, n int64) (io.ReadCloser, error) {
	obj, err := object(o, name)
	if err != nil {
		return nil, err
	}
	return &gcsReader{op: o, obj: obj, off: off, end: off + n}, nil
}

// gcsReader streams an object from off on, reopening it where it stopped after an error
// that retrying can cure (a dropped connection, a 5xx). Its caller arms the op around each
// Read and reports the progress.
type gcsReader struct {
	op  *op
	obj *gcstorage.ObjectHandle
	off int64
	end int64 // -1: to the object's end
	r   *gcstorage.Reader
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
	for {
		if g.r == nil {
			if err := g.open(); err != nil {
				return 0, err
			}
		}
		n, err := g.r.Read(b)
		g.off += int64(n)
		if err == nil || errors.Is(err, io.EOF) {
			return n, err
		}
		g.r.Close()
		g.r = nil
		if n > 0 {
			return n, nil // the caller reads again; the reader reopens at the new offset
		}
		if !g.op.retry(err) {
			return 0, err
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
	if g.r != nil {
		return g.r.Close()
	}
	return nil
}

// openFile gives random access by ranged reads, each an operation of its own with its own
// wait (see rangedFile).
func (d gcsDriver) openFile(o *op, name string) (File, error) {
	size, err := d.size(o, name)
	if err != nil {
		return nil, err
	}
	return &rangedFile{ctx: o.caller, d: d, name: name, size: size}, nil
}

func (gcsDriver) newWriter(o *op, name string) (blobWriter, error) {
	obj, err := object(o, name)
	if err != nil {
		return nil, err
	}
	w := obj.NewWriter(o.ctx)
	w.ProgressFunc = func(int64) { o.progress() }
	return &gcsWriter{w: w}, nil
}

type gcsWriter struct{ w *gcstorage.Writer }

func (g *gcsWriter) Write(b []byte) (int, error) { return g.w.Write(b) }
func (g *gcsWriter) commit() error               { return g.w.Close() }

// abort closes the writer after Create cancelled the op's context: closing it otherwise
// would commit a partial object.
func (g *gcsWriter) abort() { _ = g.w.Close() }

func (gcsDriver) remove(o *op, name string) error {
	obj, err := object(o, name)
	if err != nil {
		return err
	}
	// A retried delete whose first attempt succeeded finds nothing: not an error either.
	return gcsNotExist(obj.Delete(o.ctx))
}

// rename copies from to to within the service and deletes from.
func (gcsDriver) rename(o *op, from, to string) error {
	src, err := object(o, from)
	if err != nil {
		return err
	}
	dst, err := object(o, to)
	if err != nil {
		return err
	}
	if _, err := dst.CopierFrom(src).Run(o.ctx); err != nil {
		return gcsNotExist(err)
	}
	if err := src.Delete(o.ctx); err != nil && !errors.Is(err, gcstorage.ErrObjectNotExist) {
		return err
	}
	return nil
}

func (gcsDriver) list(o *op, dir string, recursive bool, each func(rel string, folder bool) bool) error {
	b, prefix, err := bucket(o, strings.TrimSuffix(dir, "/")+"/")
	if err != nil {
		return err
	}
	q := &gcstorage.Query{Prefix: prefix}
	if !recursive {
		q.Delimiter = "/"
	}
	it := b.Objects(o.ctx, q)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return err
		}
		o.progress()
		rel, folder := strings.TrimPrefix(attrs.Name, prefix), false
		if attrs.Name == "" { // a prefix: a folder directly under dir
			rel, folder = strings.TrimSuffix(strings.TrimPrefix(attrs.Prefix, prefix), "/"), true
		}
		if !each(rel, folder) {
			return nil
		}
	}
}

func (gcsDriver) removeFolder(*op, string) error { return nil }
