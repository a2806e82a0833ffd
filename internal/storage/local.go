package storage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// localDriver stores local files. A local file has no commit of its own: it is written
// under a temporary name (tempPrefix) in its folder, synced, renamed and the folder synced,
// which is what makes the write atomic and durable.
type localDriver struct{}

func (localDriver) syntax() pathSyntax { return localPaths{} }
func (localDriver) remote() *remote    { return nil }

// missing reports whether err says that a path is not there: nothing by its name, or a
// path under a file.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func (localDriver) size(_ *op, name string) (int64, error) {
	st, err := os.Stat(name)
	if err != nil && missing(err) && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	if err != nil {
		return 0, err
	}
	if st.IsDir() {
		return 0, nil
	}
	return st.Size(), nil
}

func (localDriver) open(_ *op, name string) (io.ReadCloser, error) { return openLocal(name) }

// openLocal opens a local file for reading, refusing what is not a file or a folder: a
// named pipe (or a link to one) would block the open until some other process writes to
// it, and a device would stream forever.
func openLocal(p string) (*os.File, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() && !st.IsDir() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	return os.Open(p)
}

func (localDriver) openFile(_ *op, name string) (File, error) {
	f, err := openLocal(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &localFile{File: f, size: st.Size()}, nil
}

type localFile struct {
	*os.File
	size int64
}

func (f *localFile) Size() int64 { return f.size }

func (localDriver) newWriter(_ *op, name string) (blobWriter, error) {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("creating its folder: %w", err)
	}
	f, err := createTemp(dir, tempPrefix(filepath.Base(name)))
	if err != nil {
		return nil, err
	}
	return &localWriter{File: f, name: name}, nil
}

// createTemp creates a new file in dir named prefix and random digits, with the permissions
// a plain create gives (0666 less the umask, or the folder's default ACL): the file keeps
// them when it is renamed to its final name. os.CreateTemp's 0600 would not.
func createTemp(dir, prefix string) (*os.File, error) {
	for range 10000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("creating a temporary in %s: every name tried exists", dir)
}

type localWriter struct {
	*os.File
	name string
}

func (w *localWriter) commit() (err error) {
	defer func() {
		if err != nil {
			w.abort()
		}
	}()
	if err := w.Sync(); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.Rename(w.Name(), w.name); err != nil {
		return err
	}
	dir := filepath.Dir(w.name)
	removeStaleTemporaries(dir, filepath.Base(w.name))
	return syncDir(dir)
}

func (w *localWriter) abort() {
	_ = w.Close()
	_ = os.Remove(w.Name())
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

func (localDriver) remove(_ *op, name string) error { return os.Remove(name) }

func (localDriver) rename(_ *op, from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o777); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return syncDir(filepath.Dir(to))
}

func (localDriver) list(_ *op, dir string, recursive bool, each func(rel string, folder bool) bool) error {
	root := dir
	if root == "" {
		root = "."
	}
	if !recursive {
		entries, err := os.ReadDir(root)
		if missing(err) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !each(e.Name(), e.IsDir()) {
				return nil
			}
		}
		return nil
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && missing(err) {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if !each(filepath.ToSlash(rel), false) {
			return filepath.SkipAll
		}
		return nil
	})
	return err
}

func (localDriver) removeFolder(_ *op, dir string) error { return os.RemoveAll(dir) }
