package datasets

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// readBuffer is the read-ahead of range readers: on gs:// every refill is one ranged request.
const readBuffer = 1 << 20

// joinPath joins a slash-separated relative path to a root of any scheme.
func joinPath(root, rel string) string {
	if rel == "" {
		return root
	}
	return storage.Join(root, strings.Split(rel, "/")...)
}

// rangeReader reads n bytes of p from off, buffered.
type rangeReader struct {
	*bufio.Reader
	f storage.File
}

func (r *rangeReader) Close() error { return r.f.Close() }

// openRange opens p for sequential reading of n bytes from off, checking first that the file
// is at least off+n bytes long.
func openRange(ctx context.Context, p string, off, n int64) (*rangeReader, error) {
	f, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	if f.Size() < off+n {
		f.Close()
		return nil, fmt.Errorf("%s: has %d bytes, the unit reads bytes %d to %d: the file is truncated or changed since planning",
			p, f.Size(), off, off+n)
	}
	return &rangeReader{Reader: bufio.NewReaderSize(io.NewSectionReader(f, off, n), readBuffer), f: f}, nil
}

// isImageName reports whether a file name has a JPEG or PNG extension, in any case.
func isImageName(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".jpg", ".jpeg", ".png":
		return true
	}
	return false
}

// comparePaths orders slash-separated paths folder by folder, so that "a/x" sorts before
// "a-b/x" whatever the listing order of the filesystem.
func comparePaths(a, b string) int {
	return strings.Compare(strings.ReplaceAll(a, "/", "\x00"), strings.ReplaceAll(b, "/", "\x00"))
}

// maxLinkDepth bounds how deep listTree follows symbolic links to folders (ImageNet-100 is
// often a folder of links to ImageNet's class folders), so a link loop ends.
const maxLinkDepth = 8

// listTree returns every file under root, as sorted slash-separated paths relative to root.
// Local folders are walked, following links; gs:// prefixes are listed with a ** glob.
func listTree(ctx context.Context, root string) ([]string, error) {
	var out []string
	switch storage.Scheme(root) {
	case "":
		if err := walkLocal(root, "", 0, &out); err != nil {
			return nil, err
		}
	case "gs":
		prefix := strings.TrimSuffix(root, "/") + "/"
		all, err := storage.List(ctx, prefix+"**")
		if err != nil {
			return nil, err
		}
		for _, p := range all {
			if rel := strings.TrimPrefix(p, prefix); rel != "" && !strings.HasSuffix(rel, "/") {
				out = append(out, rel)
			}
		}
	default:
		return nil, fmt.Errorf("listing %s: folders can be read from local and gs:// paths only", root)
	}
	slices.SortFunc(out, comparePaths)
	return out, nil
}

// listSubfolders returns the names of the folders directly under root, even empty ones (a
// file listing cannot see those): local folders and links to folders, and on gs:// the
// "name/" placeholder objects that consoles and tools create for empty folders.
func listSubfolders(ctx context.Context, root string) ([]string, error) {
	var out []string
	switch storage.Scheme(root) {
	case "":
		entries, err := os.ReadDir(root)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", root, err)
		}
		for _, e := range entries {
			isDir := e.IsDir()
			if e.Type()&fs.ModeSymlink != 0 {
				st, err := os.Stat(filepath.Join(root, e.Name()))
				isDir = err == nil && st.IsDir()
			}
			if isDir {
				out = append(out, e.Name())
			}
		}
	case "gs":
		prefix := strings.TrimSuffix(root, "/") + "/"
		all, err := storage.List(ctx, prefix+"*/")
		if err != nil {
			return nil, err
		}
		for _, p := range all {
			if name := strings.TrimSuffix(strings.TrimPrefix(p, prefix), "/"); name != "" {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func walkLocal(root, prefix string, depth int, out *[]string) error {
	// The trailing separator makes WalkDir enter dir even when it is a link to a folder.
	dir := filepath.Join(root, filepath.FromSlash(prefix)) + string(filepath.Separator)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("listing %s: %w", p, err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("listing %s: %w", p, err)
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			st, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("following link %s: %w", p, err)
			}
			if st.IsDir() {
				if depth >= maxLinkDepth {
					return fmt.Errorf("listing %s: more than %d levels of links to folders", p, maxLinkDepth)
				}
				return walkLocal(root, rel, depth+1, out)
			}
		} else if !d.Type().IsRegular() {
			return nil // sockets, devices: not files
		}
		if strings.Contains(path.Base(rel), storage.TempMarker) {
			return nil
		}
		*out = append(*out, rel)
		return nil
	})
}

// readSmall reads a whole file that must not exceed limit bytes.
func readSmall(ctx context.Context, p string, limit int64) ([]byte, error) {
	r, err := storage.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", errTooLarge, p, limit)
	}
	return data, nil
}

var errTooLarge = errors.New("file too large")

// hasGlob reports whether p holds glob metacharacters.
func hasGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

// listGlob expands a glob and refuses one that matches nothing.
func listGlob(ctx context.Context, glob string) ([]string, error) {
	files, err := storage.List(ctx, glob)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s matches no files", glob)
	}
	slices.Sort(files)
	return files, nil
}
