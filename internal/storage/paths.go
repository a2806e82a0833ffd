package storage

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Clean returns the one spelling of p that names the same place however p was written, for
// comparing paths and keying locks: a local path made absolute, cleaned, and with the
// symbolic links of its longest existing part resolved (the rest may not exist yet); a
// remote path with its slashes collapsed and no trailing slash, so that gs://b/r/,
// gs://b//r and gs://b/r/./x/.. are all gs://b/r. Clean never fails: a local path whose
// links cannot be resolved (a loop, a folder it may not read) keeps them.
func Clean(p string) string { return syntaxOf(p).clean(p) }

// cleanLocal is Clean for a local path.
func cleanLocal(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	// Resolve the links of the longest part that exists; what follows it is plain names.
	var tail []string
	for cur := abs; ; {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(append([]string{real}, tail...)...)
		} else if !errors.Is(err, os.ErrNotExist) {
			return abs
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs
		}
		tail = append([]string{filepath.Base(cur)}, tail...)
		cur = parent
	}
}

// DanglingLink returns the symbolic link, and its target, through which the local path p
// would be created where its target does not exist: p itself or the last of its folders that
// exists. Making p would fail on it ("file exists"), and p's lock (keyed by Clean, which
// cannot resolve the link) would not be the lock of the place written. It returns "" for a
// remote path and for one without such a link.
func DanglingLink(p string) (link, target string) {
	if Scheme(p) != "" {
		return "", ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", ""
	}
	for cur := abs; ; {
		fi, err := os.Lstat(cur)
		if err == nil {
			if fi.Mode()&os.ModeSymlink == 0 {
				return "", ""
			}
			if _, err := os.Stat(cur); !errors.Is(err, os.ErrNotExist) {
				return "", ""
			}
			target, _ := os.Readlink(cur)
			return cur, target
		}
		parent := filepath.Dir(cur)
		if !errors.Is(err, os.ErrNotExist) || parent == cur {
			return "", ""
		}
		cur = parent
	}
}

// Within reports whether p is dir or lies under it, both as Clean spells them: what a
// command that writes p could destroy of dir, or read of it.
func Within(p, dir string) bool {
	p, dir = Clean(p), Clean(dir)
	if Scheme(p) != Scheme(dir) {
		return false
	}
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, separator(dir))+separator(dir))
}

func separator(p string) string { return syntaxOf(p).separator() }

// Overlap reports whether a and b are the same place or one lies under the other.
func Overlap(a, b string) bool { return Within(a, b) || Within(b, a) }

// FindOverlap returns a path of a and a path of b that are the same place or of which one
// lies under the other, as Within decides; ok is false when no two do. It cleans each path
// once, so that comparing thousands of folders with thousands stays cheap.
func FindOverlap(a, b []string) (inA, inB string, ok bool) {
	type entry struct{ clean, given string }
	cb := make([]entry, len(b))
	for i, p := range b {
		cb[i] = entry{Clean(p), p}
	}
	slices.SortFunc(cb, func(x, y entry) int { return strings.Compare(x.clean, y.clean) })
	find := func(c string) (int, bool) {
		return slices.BinarySearchFunc(cb, c, func(e entry, c string) int { return strings.Compare(e.clean, c) })
	}
	for _, p := range a {
		c := Clean(p)
		// b's paths at or under c: c itself, then those that start with c and a separator.
		if i, found := find(c); found {
			return p, cb[i].given, true
		}
		under := strings.TrimSuffix(c, separator(c)) + separator(c)
		if i, _ := find(under); i < len(cb) && strings.HasPrefix(cb[i].clean, under) {
			return p, cb[i].given, true
		}
		// b's paths that hold c: its ancestors.
		for cur := c; ; {
			parent := Parent(cur)
			if parent == cur {
				break
			}
			if i, found := find(parent); found {
				return p, cb[i].given, true
			}
			cur = parent
		}
	}
	return "", "", false
}

// Parent is the folder holding a path as Clean spells it; a root (/, gs://bucket) is its
// own.
func Parent(c string) string { return syntaxOf(c).parent(c) }
