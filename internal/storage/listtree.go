package storage

import (
	"context"
	"path"
	"slices"
	"strings"
)

// ListDir returns the names of the files and folders directly in dir (on an object store, a
// folder is a prefix with objects under it), temporaries included, lock files (see LockFile)
// left out. A missing dir lists as empty.
func ListDir(ctx context.Context, dir string) ([]string, error) {
	return run(ctx, "listing", dir, func(d driver, o *op) ([]string, error) {
		names := []string{}
		err := d.list(o, dir, false, func(rel string, _ bool) bool {
			if rel != "" && !strings.Contains(rel, "/") && !isLockFile(rel) {
				names = append(names, rel)
			}
			return true
		})
		return names, err
	})
}

// ListTree returns the paths, relative to dir and slash-separated, of every file under dir,
// sorted. Temporaries are included: callers decide what to do with them. Lock files (see
// LockFile) are left out: they belong to the writers of what they lock. A missing directory
// lists as empty.
func ListTree(ctx context.Context, dir string) ([]string, error) {
	return run(ctx, "listing", dir, func(d driver, o *op) ([]string, error) {
		var out []string
		err := d.list(o, dir, true, func(rel string, _ bool) bool {
			if rel != "" && !strings.HasSuffix(rel, "/") && !isLockFile(path.Base(rel)) { // not a folder's placeholder
				out = append(out, rel)
			}
			return true
		})
		slices.Sort(out)
		return out, err
	})
}

// RemoveTree deletes every file under dir and, for a local dir, the folders too (object
// stores have none to leave behind). A missing dir is not an error.
func RemoveTree(ctx context.Context, dir string) error {
	files, err := ListTree(ctx, dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := Remove(ctx, Join(dir, strings.Split(f, "/")...)); err != nil {
			return err
		}
	}
	_, err = run(ctx, "removing", dir, func(d driver, o *op) (struct{}, error) {
		return struct{}{}, d.removeFolder(o, dir)
	})
	return err
}

// RemoveTemporaries deletes the files that an interrupted Create left in dir and returns how
// many it removed. Run it before a job writes into dir again. (Only local files are written
// under temporary names, but a listing finds whatever another tool left on any store.)
func RemoveTemporaries(ctx context.Context, dir string) (int, error) {
	names, err := run(ctx, "listing temporaries in", dir, func(d driver, o *op) ([]string, error) {
		var names []string
		err := d.list(o, dir, false, func(rel string, folder bool) bool {
			if !folder && isTemporary(rel) {
				names = append(names, rel)
			}
			return true
		})
		return names, err
	})
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		if err := Remove(ctx, Join(dir, name)); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}
