package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

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
	if Scheme(dir) == "" {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
	}
	return nil
}

// ListTree returns the paths, relative to dir and slash-separated, of every file under dir
// (for memfs://, up to three levels deep), sorted. Temporaries are included: callers decide
// what to do with them. A missing local directory lists as empty.
func ListTree(ctx context.Context, dir string) ([]string, error) {
	var out []string
	switch Scheme(dir) {
	case "":
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == dir && errors.Is(err, os.ErrNotExist) {
					return filepath.SkipDir
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", dir, err)
		}
	case "gs":
		names, err := listGCS(ctx, dir, true)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	default:
		fsys, err := filesystemFor(ctx, dir)
		if err != nil {
			return nil, err
		}
		defer fsys.Close()
		root := strings.TrimSuffix(dir, "/") + "/"
		for _, glob := range []string{"*", "*/*", "*/*/*"} {
			all, err := fsys.List(ctx, root+glob)
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", dir, err)
			}
			bare := strings.TrimPrefix(root, Scheme(root)+"://")
			for _, p := range all {
				out = append(out, strings.TrimPrefix(strings.TrimPrefix(p, Scheme(root)+"://"), bare))
			}
		}
		out = slices.Compact(slices.Sorted(slices.Values(out)))
	}
	slices.Sort(out)
	return out, nil
}
