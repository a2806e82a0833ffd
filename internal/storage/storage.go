package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/memfs" // memfs:// paths, for tests
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/gcsx"
)

// TempMarker is part of the name of every file this package writes under a temporary name.
// A file whose name holds it is never data: readers skip it and RemoveTemporaries deletes it.
const TempMarker = ".tmp-for-creation-"

// tempPrefix starts the temporary names of the file name: ".NAME.tmp-for-creation-" and
// random digits. Other programs must not take a temporary for data either: the leading dot
// hides it from the readers that skip hidden files (pyarrow datasets, Spark, Hadoop), and
// the digits at the end keep it out of globs such as DuckDB's '**/*.parquet'.
func tempPrefix(name string) string { return "." + name + TempMarker }

// Scheme returns the filesystem scheme of p: "gs", "memfs" or "" for a local path.
func Scheme(p string) string {
	if i := strings.Index(p, "://"); i > 0 {
		return p[:i]
	}
	return ""
}

// Join joins path elements with forward slashes for remote schemes and the OS separator for
// local paths.
func Join(dir string, elem ...string) string {
	if Scheme(dir) == "" {
		return filepath.Join(append([]string{dir}, elem...)...)
	}
	scheme, rest, _ := strings.Cut(dir, "://")
	return scheme + "://" + path.Join(append([]string{rest}, elem...)...)
}

// Base returns the last element of p.
func Base(p string) string {
	if Scheme(p) == "" {
		return filepath.Base(p)
	}
	return path.Base(p)
}

func filesystemFor(ctx context.Context, p string) (filesystem.Interface, error) {
	fs, err := filesystem.New(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("filesystem for %s: %w", p, err)
	}
	return fs, nil
}

// Create writes p atomically: write receives a writer, and the file appears under p only if
// write returns nil and the data is committed. On any error nothing is left under p and any
// earlier file there is untouched.
//
// Local files are written under a temporary name in the same folder, synced, renamed and the
// folder synced. GCS objects become visible only when their upload is finalised, so they are
// written under their final name and an error cancels the upload instead of committing it.
func Create(ctx context.Context, p string, write func(w io.Writer) error) error {
	switch Scheme(p) {
	case "":
		return createLocal(p, write)
	case "gs":
		return createGCS(ctx, p, write)
	default:
		// memfs commits whatever was written when the writer closes: buffer, then write.
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		fs, err := filesystemFor(ctx, p)
		if err != nil {
			return err
		}
		defer fs.Close()
		if err := filesystem.Write(ctx, fs, p, buf.Bytes()); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		return nil
	}
}

func createLocal(p string, write func(w io.Writer) error) (err error) {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating folder for %s: %w", p, err)
	}
	f, err := os.CreateTemp(dir, tempPrefix(filepath.Base(p))+"*")
	if err != nil {
		return fmt.Errorf("creating %s: %w", p, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", p, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("setting mode of %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("committing %s: %w", p, err)
	}
	removeStaleTemporaries(dir, filepath.Base(p))
	return syncDir(dir)
}

// processStart tells this process's temporaries from those of processes that died: a file
// last written before it started is not being written by it.
var processStart = time.Now()

// removeStaleTemporaries deletes the temporaries of name in dir that processes killed while
// writing it left: the write that completes the file is the one they could not finish.
// Temporaries written since this process started are left alone (another goroutine may be
// writing the same file). Failing to remove one is not an error: it is litter, not data.
func removeStaleTemporaries(dir, name string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		// Versions before tempPrefix named them NAME.tmp-for-creation-…: those go too.
		if !strings.HasPrefix(e.Name(), tempPrefix(name)) && !strings.HasPrefix(e.Name(), name+TempMarker) {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(processStart) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening folder %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing folder %s: %w", dir, err)
	}
	return nil
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
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return data, nil
}

// Open opens p for sequential reading.
func Open(ctx context.Context, p string) (io.ReadCloser, error) {
	switch Scheme(p) {
	case "":
		return openLocal(p)
	case "gs":
		return openGCS(ctx, p)
	}
	fs, err := filesystemFor(ctx, p)
	if err != nil {
		return nil, err
	}
	r, err := fs.OpenRead(ctx, p)
	if err != nil {
		fs.Close()
		return nil, fmt.Errorf("opening %s: %w", p, err)
	}
	return &closeBoth{ReadCloser: r, fs: fs}, nil
}

// openLocal opens a local file for reading, refusing what is not a file or a folder: a
// named pipe (or a link to one) would block the open until some other process writes to
// it, and a device would stream forever.
func openLocal(p string) (*os.File, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", p, err)
	}
	if !st.Mode().IsRegular() && !st.IsDir() {
		return nil, fmt.Errorf("opening %s: not a regular file (%s)", p, st.Mode().Type())
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", p, err)
	}
	return f, nil
}

type closeBoth struct {
	io.ReadCloser
	fs filesystem.Interface
}

func (c *closeBoth) Close() error {
	err := c.ReadCloser.Close()
	return errors.Join(err, c.fs.Close())
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
	switch Scheme(p) {
	case "":
		f, err := openLocal(p)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("opening %s: %w", p, err)
		}
		return &localFile{File: f, size: st.Size()}, nil
	case "gs":
		return openGCSFile(ctx, p)
	default:
		data, err := ReadFile(ctx, p)
		if err != nil {
			return nil, err
		}
		return BytesFile(data), nil
	}
}

// BytesFile is a File over bytes held in memory (what OpenFile gives for memfs:// paths).
func BytesFile(data []byte) File { return &memFile{Reader: bytes.NewReader(data)} }

type localFile struct {
	*os.File
	size int64
}

func (f *localFile) Size() int64 { return f.size }

type memFile struct{ *bytes.Reader }

func (f *memFile) Close() error { return nil }

// List returns the files matching glob, sorted, leaving out temporaries (see TempMarker).
func List(ctx context.Context, glob string) ([]string, error) {
	all, err := listGlob(ctx, glob)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range all {
		if !strings.Contains(Base(p), TempMarker) {
			out = append(out, p)
		}
	}
	return out, nil
}

// listGlob returns every file matching glob, temporaries included.
func listGlob(ctx context.Context, glob string) ([]string, error) {
	if Scheme(glob) == "gs" {
		return listGCSGlob(ctx, glob)
	}
	fs, err := filesystemFor(ctx, glob)
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	all, err := fs.List(ctx, glob)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", glob, err)
	}
	return all, nil
}

// Size returns the size of p in bytes.
func Size(ctx context.Context, p string) (int64, error) {
	if Scheme(p) == "gs" {
		attrs, err := gcsAttrs(ctx, "size of", p)
		if err != nil {
			return 0, err
		}
		return attrs.Size, nil
	}
	fs, err := filesystemFor(ctx, p)
	if err != nil {
		return 0, err
	}
	defer fs.Close()
	n, err := fs.Size(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", p, err)
	}
	return n, nil
}

// Exists reports whether p exists.
func Exists(ctx context.Context, p string) (bool, error) {
	switch Scheme(p) {
	case "":
		return localExists(p)
	case "gs":
		return gcsExists(ctx, p)
	default:
		matches, err := List(ctx, p)
		if err != nil {
			return false, err
		}
		return len(matches) > 0, nil
	}
}

// localExists reports whether the local path p exists.
func localExists(p string) (bool, error) {
	_, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) { // ENOTDIR: a path under a file
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", p, err)
	}
	return true, nil
}

// Present reports whether p is a file or a folder: for gs://, an object or a prefix with
// objects under it (GCS has no folders); for memfs://, a file or one directly under p.
func Present(ctx context.Context, p string) (bool, error) {
	switch Scheme(p) {
	case "":
		return localExists(p)
	case "gs":
		if _, object, err := gcsx.ParseObject(p); err == nil && object != "" { // not a bucket's root
			if ok, err := gcsExists(ctx, p); ok || err != nil {
				return ok, err
			}
		}
		return gcsHasPrefix(ctx, p)
	default:
		if ok, err := Exists(ctx, p); ok || err != nil {
			return ok, err
		}
		under, err := listGlob(ctx, Join(p, "*"))
		return len(under) > 0, err
	}
}

// Remove deletes p. Removing a file that does not exist is not an error.
func Remove(ctx context.Context, p string) error {
	switch Scheme(p) {
	case "":
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", p, err)
		}
		return nil
	case "gs":
		return gcsRemove(ctx, p)
	}
	fs, err := filesystemFor(ctx, p)
	if err != nil {
		return err
	}
	defer fs.Close()
	rm, ok := fs.(filesystem.Remover)
	if !ok {
		return fmt.Errorf("removing %s: filesystem cannot remove files", p)
	}
	if err := rm.Remove(ctx, p); err != nil {
		if ok, _ := Exists(ctx, p); !ok {
			return nil
		}
		return fmt.Errorf("removing %s: %w", p, err)
	}
	return nil
}

// RemoveTemporaries deletes the files that an interrupted Create left in dir and returns how
// many it removed. Run it before a job writes into dir again.
func RemoveTemporaries(ctx context.Context, dir string) (int, error) {
	if Scheme(dir) == "" {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
	}
	if Scheme(dir) == "gs" {
		// GCS writes are never visible before they complete: nothing to clean.
		return 0, nil
	}
	fs, err := filesystemFor(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer fs.Close()
	all, err := fs.List(ctx, Join(dir, "*"+TempMarker+"*"))
	if err != nil {
		return 0, fmt.Errorf("listing temporaries in %s: %w", dir, err)
	}
	for _, p := range all {
		if err := Remove(ctx, p); err != nil {
			return 0, err
		}
	}
	return len(all), nil
}

// ListDir returns the names of the objects directly under a gs:// prefix or the entries of a
// local folder. Beam's List takes globs; this is the plain listing the manifest checks need.
func ListDir(ctx context.Context, dir string) ([]string, error) {
	switch Scheme(dir) {
	case "":
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", dir, err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names, nil
	case "gs":
		return listGCS(ctx, dir, false)
	default:
		all, err := List(ctx, Join(dir, "*"))
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(all))
		for _, p := range all {
			names = append(names, Base(p))
		}
		return names, nil
	}
}

// listGCS returns the names of the objects under the folder dir, relative to it: every object
// below it, or only those directly in it. Folder placeholders (names ending in "/") are left
// out.
func listGCS(ctx context.Context, dir string, recursive bool) ([]string, error) {
	bucket, prefix, err := gcsx.ParseObject(strings.TrimSuffix(dir, "/") + "/")
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", dir, err)
	}
	delim := "/"
	if recursive {
		delim = ""
	}
	var names []string
	err = listGCSObjects(ctx, "listing", dir, bucket, prefix, delim, func(name string) {
		if rel := strings.TrimPrefix(name, prefix); rel != "" && !strings.HasSuffix(rel, "/") {
			names = append(names, rel)
		}
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// Rename moves the file from to the path to (both on one filesystem), replacing a file
// there: what a commit step does to make staged output visible under its final name. A
// local rename is atomic and the folder is synced; a GCS object is copied (within the
// service) and the original deleted; a memfs:// file is renamed in memory.
func Rename(ctx context.Context, from, to string) error {
	if Scheme(from) != Scheme(to) {
		return fmt.Errorf("renaming %s to %s: not on one filesystem", from, to)
	}
	switch Scheme(from) {
	case "":
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return fmt.Errorf("renaming %s: %w", from, err)
		}
		if err := os.Rename(from, to); err != nil {
			return fmt.Errorf("renaming %s to %s: %w", from, to, err)
		}
		return syncDir(filepath.Dir(to))
	case "gs":
		return gcsRename(ctx, from, to)
	}
	fs, err := filesystemFor(ctx, from)
	if err != nil {
		return err
	}
	defer fs.Close()
	if err := filesystem.Rename(ctx, fs, from, to); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", from, to, err)
	}
	return nil
}
