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

// isHidden reports whether a file or folder name is hidden (.ipynb_checkpoints, .DS_Store):
// tools leave such things in image folders, and a hidden folder taken for a class would
// shift every label after it.
func isHidden(name string) bool { return strings.HasPrefix(name, ".") }

// hasHiddenPart reports whether a slash-separated path passes through a hidden name.
func hasHiddenPart(rel string) bool {
	for part := range strings.SplitSeq(rel, "/") {
		if isHidden(part) {
			return true
		}
	}
	return false
}

// comparePaths orders slash-separated paths folder by folder, so that "a/x" sorts before
// "a-b/x" whatever the listing order of the filesystem.
func comparePaths(a, b string) int {
	return strings.Compare(strings.ReplaceAll(a, "/", "\x00"), strings.ReplaceAll(b, "/", "\x00"))
}

// maxLinkFolders bounds how many folders listTree enters through symbolic links
// (ImageNet-100 is often a folder of links to ImageNet's class folders).
const maxLinkFolders = 100000

// listTree returns every file under root, as sorted slash-separated paths relative to root.
// Local folders are walked, following links; gs:// prefixes are listed with a ** glob.
func listTree(ctx context.Context, root string) ([]string, error) {
	var out []string
	switch storage.Scheme(root) {
	case "":
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", root, err)
		}
		if err := walkLocal(root, "", map[string]string{real: root}, &out); err != nil {
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
			if isHidden(e.Name()) {
				continue
			}
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
			if name := strings.TrimSuffix(strings.TrimPrefix(p, prefix), "/"); name != "" && !isHidden(name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// walkLocal appends the files under prefix of root to out. seen holds the real path of every
// folder entered so far through a link (and of root), and the path it was first reached by:
// a link to one of them is refused, so that links can neither loop nor fan out (a folder of
// links to itself would otherwise be listed ten times per level, level after level).
func walkLocal(root, prefix string, seen map[string]string, out *[]string) error {
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
			switch {
			case st.IsDir():
				if len(seen) > maxLinkFolders {
					return fmt.Errorf("listing %s: more than %d links to folders", root, maxLinkFolders)
				}
				real, err := filepath.EvalSymlinks(p)
				if err != nil {
					return fmt.Errorf("following link %s: %w", p, err)
				}
				if first, ok := seen[real]; ok {
					return fmt.Errorf("listing %s: the link %s leads to %s, already listed as %s: a folder is read once", root, p, real, first)
				}
				seen[real] = p
				return walkLocal(root, rel, seen, out)
			case !st.Mode().IsRegular():
				return nil // a link to a named pipe or a device: not a file, and opening it would block
			}
		} else if !d.Type().IsRegular() {
			return nil // sockets, devices, named pipes: not files
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

// ctxReader stops reading when ctx is done: a long read (a whole gzip stream checked while
// planning) ends at the first Ctrl-C or SIGTERM instead of running to its end.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

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
