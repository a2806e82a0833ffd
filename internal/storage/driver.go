package storage

import (
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
)

// driver is one kind of store. It does the store's own work and nothing else: what every
// store shares (choosing the driver, naming the file in errors, the stall watch, glob
// matching, leaving temporaries out of listings) is done once by the functions of this
// package, above the drivers. Every method runs inside an *op: its context is cancelled when
// a watched operation stalls, and a driver reports progress and retries through it.
//
// Names are whole paths as the caller spelled them ("/data/x", "gs://b/x"); a missing file
// is an error that errors.Is(err, fs.ErrNotExist) recognises.
type driver interface {
	// syntax is how the store's paths are joined, split and compared.
	syntax() pathSyntax
	// remote describes where the store's requests go, for the stall watch and messages;
	// nil for a store whose operations cannot stall on a network.
	remote() *remote

	// size returns the size of the file name (a local folder exists too, size 0).
	size(op *op, name string) (int64, error)
	// open streams name from its start; a missing file fails here, not at the first read.
	open(op *op, name string) (io.ReadCloser, error)
	// openFile opens name for random access.
	openFile(op *op, name string) (File, error)
	// newWriter starts writing name: what is written becomes visible under name only on
	// commit, and abort leaves nothing there (an earlier file stays as it was).
	newWriter(op *op, name string) (blobWriter, error)
	// remove deletes the file name.
	remove(op *op, name string) error
	// rename moves from to to, replacing a file there.
	rename(op *op, from, to string) error
	// list calls each with the name, relative to dir and slash-separated, of what lies under
	// dir: with recursive, every file at any depth; without, the files and folders directly
	// in it (a folder once, without a trailing slash, with folder set). A missing dir lists
	// nothing. Object stores may give "" or a name ending in "/" for the placeholders some
	// tools write for folders. each returns false to stop the listing.
	list(op *op, dir string, recursive bool, each func(rel string, folder bool) bool) error
	// removeFolder deletes what is left of the folder dir once its files are removed (local
	// folders); object stores have nothing to remove.
	removeFolder(op *op, dir string) error
	// tryLock takes the lock held in the lock file name without waiting (see TryLock): its
	// release, or nil and what the holder said.
	tryLock(op *op, name string, exclusive bool, holder string) (release func(), heldBy string, err error)
}

// blobWriter is a write in progress (gocloud's driver.Writer, with the abort explicit).
type blobWriter interface {
	io.Writer
	commit() error
	abort()
}

// drivers holds the driver of each scheme: the one place where a path's scheme chooses how
// it is stored. "" is a local path.
var drivers = map[string]driver{
	"":      localDriver{},
	"gs":    gcsDriver{},
	"memfs": memDriver{},
}

// lookup returns the driver of p's scheme.
func lookup(p string) (driver, bool) {
	d, ok := drivers[Scheme(p)]
	return d, ok
}

// driverFor returns the driver of p's scheme or an error naming p.
func driverFor(p string) (driver, error) {
	d, ok := lookup(p)
	if !ok {
		return nil, fmt.Errorf("%s: no storage for scheme %q (local paths, gs:// and memfs:// are stored)", p, Scheme(p))
	}
	return d, nil
}

// syntaxOf returns the path syntax of p: its driver's, or the slash syntax of URLs for a
// scheme no driver stores (such a path can still be joined and compared).
func syntaxOf(p string) pathSyntax {
	if d, ok := lookup(p); ok {
		return d.syntax()
	}
	return urlPaths{}
}

// pathSyntax is how a store spells its paths.
type pathSyntax interface {
	join(dir string, elem ...string) string
	base(p string) string
	// clean returns the one spelling of p (see Clean).
	clean(p string) string
	// parent returns the folder of a cleaned path; a root is its own.
	parent(c string) string
	separator() string
	// child names rel (slash-separated, as listings give it) under the literal prefix dir.
	child(dir, rel string) string
}

// localPaths is the syntax of the local filesystem.
type localPaths struct{}

func (localPaths) join(dir string, elem ...string) string {
	return filepath.Join(append([]string{dir}, elem...)...)
}
func (localPaths) base(p string) string   { return filepath.Base(p) }
func (localPaths) clean(p string) string  { return cleanLocal(p) }
func (localPaths) parent(c string) string { return filepath.Dir(c) }
func (localPaths) separator() string      { return string(filepath.Separator) }
func (localPaths) child(dir, rel string) string {
	if dir == "" {
		return filepath.FromSlash(rel)
	}
	return filepath.Join(dir, filepath.FromSlash(rel))
}

// urlPaths is the syntax of SCHEME://... paths: slash-separated, whatever the OS.
type urlPaths struct{}

func (urlPaths) join(dir string, elem ...string) string {
	scheme, rest, _ := strings.Cut(dir, "://")
	return scheme + "://" + path.Join(append([]string{rest}, elem...)...)
}
func (urlPaths) base(p string) string { return path.Base(p) }
func (urlPaths) clean(p string) string {
	scheme, rest, _ := strings.Cut(p, "://")
	return scheme + "://" + strings.TrimPrefix(path.Clean("/"+rest), "/")
}
func (urlPaths) parent(c string) string {
	scheme, rest, _ := strings.Cut(c, "://")
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		return c
	}
	return scheme + "://" + rest[:i]
}
func (urlPaths) separator() string { return "/" }

// child keeps dir as spelled: object names are not cleaned ("a//b" and "a/b" are two
// objects).
func (urlPaths) child(dir, rel string) string { return strings.TrimSuffix(dir, "/") + "/" + rel }
