package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
)

// TempMarker is part of the name of every file this package writes under a temporary name.
// A file whose name holds it is never data: readers skip it and RemoveTemporaries deletes it.
const TempMarker = ".tmp-for-creation-"

// tempPrefix starts the temporary names of the file name: ".NAME.tmp-for-creation-" and
// random digits (at most tempDigits). Other programs must not take a temporary for data
// either: the leading dot hides it from the readers that skip hidden files (pyarrow datasets,
// Spark, Hadoop), and the digits at the end keep it out of globs such as DuckDB's
// '**/*.parquet'. A name too long to take the marker and the digits is shortened (see
// hiddenName), so that every name a filesystem takes can be written atomically.
func tempPrefix(name string) string { return hiddenName(name, TempMarker, tempDigits) }

// tempDigits is the most digits a temporary's random number has.
const tempDigits = 10

// isTemporary reports whether the file name (the last element of a path) is a temporary.
func isTemporary(name string) bool { return strings.Contains(name, TempMarker) }

// Scheme returns the filesystem scheme of p: "gs", "memfs" or "" for a local path.
func Scheme(p string) string {
	if i := strings.Index(p, "://"); i > 0 {
		return p[:i]
	}
	return ""
}

// Join joins path elements with forward slashes for remote schemes and the OS separator for
// local paths.
func Join(dir string, elem ...string) string { return syntaxOf(dir).join(dir, elem...) }

// Base returns the last element of p.
func Base(p string) string { return syntaxOf(p).base(p) }

// Create writes p atomically: write receives a writer, and the file appears under p only if
// write returns nil and the data is committed. On any error nothing is left under p and any
// earlier file there is untouched.
//
// Local files are written under a temporary name in the same folder, synced, renamed and the
// folder synced. GCS objects become visible only when their upload is finalised, so they are
// written under their final name and an error cancels the upload instead of committing it;
// memfs:// files are buffered and stored whole.
func Create(ctx context.Context, p string, write func(w io.Writer) error) error {
	d, err := driverFor(p)
	if err != nil {
		return err
	}
	o := startOp(ctx, d, "creating", p)
	defer o.done()
	o.arm()
	w, err := d.newWriter(o, p)
	o.disarm()
	if err != nil {
		return o.fail(err)
	}
	o.what = "writing"
	if err := write(&opWriter{w: w, op: o}); err != nil {
		o.cancel(errAborted) // first: a GCS upload whose context ended is cancelled, not committed
		w.abort()
		if o.worded(err) {
			return err
		}
		return fmt.Errorf("writing %s: %w", p, err)
	}
	o.what = "committing"
	o.arm()
	err = w.commit()
	o.disarm()
	return o.fail(err)
}

// opWriter is armed while a write waits for the store to take its bytes.
type opWriter struct {
	w  blobWriter
	op *op
}

func (w *opWriter) Write(b []byte) (int, error) {
	w.op.arm()
	n, err := w.w.Write(b)
	w.op.disarm()
	return n, w.op.fail(err)
}

// WriteFile writes data to p atomically (see Create).
func WriteFile(ctx context.Context, p string, data []byte) error {
	return Create(ctx, p, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// ReadFile reads the whole of p.
func ReadFile(ctx context.Context, p string) ([]byte, error) {
	r, err := Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r) // the reader's errors name p
}

// Open opens p for sequential reading.
func Open(ctx context.Context, p string) (io.ReadCloser, error) {
	d, err := driverFor(p)
	if err != nil {
		return nil, err
	}
	o := startOp(ctx, d, "opening", p)
	o.arm()
	r, err := d.open(o, p)
	o.disarm()
	if err != nil {
		o.done()
		return nil, o.fail(err)
	}
	o.what = "reading"
	return &opReader{r: r, op: o}, nil
}

// opReader is armed while a read waits for bytes, which restart the wait as they come.
type opReader struct {
	r  io.ReadCloser
	op *op
}

func (r *opReader) Read(b []byte) (int, error) {
	r.op.arm()
	defer r.op.disarm()
	n, err := r.r.Read(b)
	if n > 0 {
		r.op.progress()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = r.op.fail(err)
	}
	return n, err
}

func (r *opReader) Close() error {
	err := r.r.Close()
	r.op.done()
	return r.op.fail(err)
}

// File is random access to a stored file, as Parquet readers need.
type File interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// OpenFile opens p for random access. GCS objects are read with ranged requests; in-memory
// files are read whole.
func OpenFile(ctx context.Context, p string) (File, error) {
	return run(ctx, "opening", p, func(d driver, o *op) (File, error) { return d.openFile(o, p) })
}

// rangedFile is random access to an object by ranged reads: each ReadAt is an operation of
// its own, with its own wait.
type rangedFile struct {
	ctx  context.Context
	d    rangeReader
	name string
	size int64
}

func (f *rangedFile) Size() int64 { return f.size }

// Close releases nothing: a ranged read holds no connection between calls.
func (f *rangedFile) Close() error { return nil }

func (f *rangedFile) ReadAt(b []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	n := min(int64(len(b)), f.size-off)
	o := startOp(f.ctx, f.d, fmt.Sprintf("reading at %d", off), f.name)
	defer o.done()
	r, err := f.d.newRangeReader(o, f.name, off, n)
	if err != nil {
		return 0, o.fail(err)
	}
	defer r.Close()
	got, err := io.ReadFull(&opReader{r: io.NopCloser(r), op: o}, b[:n])
	if err != nil {
		return got, o.fail(err)
	}
	if got < len(b) {
		return got, io.EOF
	}
	return got, nil
}

// rangeReader is a driver that reads part of a file (for rangedFile).
type rangeReader interface {
	driver
	newRangeReader(o *op, name string, off, n int64) (io.ReadCloser, error)
}

// Size returns the size of p in bytes.
func Size(ctx context.Context, p string) (int64, error) {
	return run(ctx, "size of", p, func(d driver, o *op) (int64, error) { return d.size(o, p) })
}

// Exists reports whether p exists (a file, or a local folder).
func Exists(ctx context.Context, p string) (bool, error) {
	return run(ctx, "checking", p, func(d driver, o *op) (bool, error) { return exists(d, o, p) })
}

func exists(d driver, o *op, p string) (bool, error) {
	_, err := d.size(o, p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Present reports whether p is a file or a folder: on an object store (gs://, memfs://), an
// object or a prefix with objects under it (object stores have no folders).
func Present(ctx context.Context, p string) (bool, error) {
	return run(ctx, "checking", p, func(d driver, o *op) (bool, error) {
		if ok, err := exists(d, o, p); ok || err != nil {
			return ok, err
		}
		found := false
		err := d.list(o, p, true, func(string, bool) bool { found = true; return false })
		return found, err
	})
}

// Remove deletes p. Removing a file that does not exist is not an error.
func Remove(ctx context.Context, p string) error {
	_, err := run(ctx, "removing", p, func(d driver, o *op) (struct{}, error) {
		if err := d.remove(o, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	return err
}

// Rename moves the file from to the path to (both on one filesystem), replacing a file
// there: what a commit step does to make staged output visible under its final name. A
// local rename is atomic and the folder is synced; a GCS object is copied (within the
// service) and the original deleted; a memfs:// file is renamed in memory.
func Rename(ctx context.Context, from, to string) error {
	if Scheme(from) != Scheme(to) {
		return fmt.Errorf("renaming %s to %s: not on one filesystem", from, to)
	}
	_, err := run(ctx, "renaming", from, func(d driver, o *op) (struct{}, error) {
		if err := d.rename(o, from, to); err != nil {
			return struct{}{}, fmt.Errorf("to %s: %w", to, err)
		}
		return struct{}{}, nil
	})
	return err
}

// List returns the files matching glob, sorted, leaving out temporaries (see TempMarker) and
// lock files (see LockFile).
// Every store matches globs as Beam's gcs filesystem (and the Java and Python SDKs) match
// them: * and ? match within one path element, ** across elements, and [...] a class
// ([!...] negated). Only files match, never folders.
func List(ctx context.Context, glob string) ([]string, error) {
	all, err := listGlob(ctx, glob)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(p string) bool { return isTemporary(Base(p)) || isLockFile(Base(p)) }), nil
}

// listGlob returns every file matching glob, temporaries included: it lists the folder
// before the first metacharacter (only that folder when the rest of the glob is one element)
// and matches what it finds.
func listGlob(ctx context.Context, glob string) ([]string, error) {
	return run(ctx, "listing", glob, func(d driver, o *op) ([]string, error) {
		sep := d.syntax().separator()
		dir, pattern := "", glob
		meta := strings.IndexAny(glob, "*?[")
		if meta < 0 {
			meta = len(glob)
		}
		if i := strings.LastIndex(glob[:meta], sep); i >= 0 {
			dir, pattern = glob[:i+1], glob[i+1:]
		}
		re, err := globRegexp(strings.ReplaceAll(pattern, sep, "/"))
		if err != nil {
			return nil, err
		}
		recursive := strings.Contains(pattern, "/") || strings.Contains(pattern, sep) || strings.Contains(pattern, "**")
		listDir := dir
		if len(listDir) > len(sep) {
			listDir = strings.TrimSuffix(listDir, sep)
		}
		var out []string
		err = d.list(o, listDir, recursive, func(rel string, folder bool) bool {
			if !folder && re.MatchString(rel) {
				out = append(out, d.syntax().child(dir, rel))
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		slices.Sort(out)
		return out, nil
	})
}
