package storage

import (
	"bytes"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
)

// memDriver stores memfs:// files in this process's memory, for tests: an object store
// (flat names, a write visible whole on commit, folders only as prefixes), like GCS, so a
// test on memfs:// meets the semantics that matter on gs:// without a server. Files live
// until the process ends; the pipelines' workers on prism run in the same process.
type memDriver struct{}

// memFiles holds the files, keyed by their path as written ("memfs://x/y").
var memFiles = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

func (memDriver) syntax() pathSyntax { return urlPaths{} }
func (memDriver) remote() *remote    { return nil }

func memGet(name string) ([]byte, error) {
	memFiles.Lock()
	defer memFiles.Unlock()
	data, ok := memFiles.m[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return data, nil
}

func (memDriver) size(_ *op, name string) (int64, error) {
	data, err := memGet(name)
	return int64(len(data)), err
}

func (memDriver) open(_ *op, name string) (io.ReadCloser, error) {
	data, err := memGet(name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (memDriver) openFile(_ *op, name string) (File, error) {
	data, err := memGet(name)
	if err != nil {
		return nil, err
	}
	return BytesFile(data), nil
}

// BytesFile is a File over bytes held in memory (what OpenFile gives for memfs:// paths).
func BytesFile(data []byte) File { return &memFile{Reader: bytes.NewReader(data)} }

type memFile struct{ *bytes.Reader }

func (f *memFile) Close() error { return nil }

func (memDriver) newWriter(_ *op, name string) (blobWriter, error) {
	return &memWriter{name: name}, nil
}

// memWriter buffers a file and stores it whole on commit. The stored bytes are never
// changed afterwards (a new write replaces them), so readers may share them.
type memWriter struct {
	name string
	buf  bytes.Buffer
}

func (w *memWriter) Write(b []byte) (int, error) { return w.buf.Write(b) }

func (w *memWriter) commit() error {
	memFiles.Lock()
	defer memFiles.Unlock()
	memFiles.m[w.name] = bytes.Clone(w.buf.Bytes())
	return nil
}

func (w *memWriter) abort() { w.buf.Reset() }

func (memDriver) remove(_ *op, name string) error {
	memFiles.Lock()
	defer memFiles.Unlock()
	if _, ok := memFiles.m[name]; !ok {
		return fs.ErrNotExist
	}
	delete(memFiles.m, name)
	return nil
}

func (memDriver) rename(_ *op, from, to string) error {
	memFiles.Lock()
	defer memFiles.Unlock()
	data, ok := memFiles.m[from]
	if !ok {
		return fs.ErrNotExist
	}
	memFiles.m[to] = data
	delete(memFiles.m, from)
	return nil
}

func (memDriver) list(_ *op, dir string, recursive bool, each func(rel string, folder bool) bool) error {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	type entry struct {
		rel    string
		folder bool
	}
	memFiles.Lock()
	var entries []entry
	for k := range memFiles.m {
		if rel, ok := strings.CutPrefix(k, prefix); ok {
			e := entry{rel: rel}
			if i := strings.Index(rel, "/"); !recursive && i >= 0 {
				e = entry{rel: rel[:i], folder: true} // named once below
			}
			entries = append(entries, e)
		}
	}
	memFiles.Unlock()
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	for _, e := range slices.Compact(entries) {
		if !each(e.rel, e.folder) {
			return nil
		}
	}
	return nil
}

func (memDriver) removeFolder(*op, string) error { return nil }
