package datasets

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// folderSplits are the split names an image folder's root is looked at for: its Splits
// are any names, but these are the ones a root holds in the layouts people publish.
var folderSplits = []string{"train", "val", "test"}

// knownSplits are the splits whose places resolveInput looks for: the dataset's own, or for
// a dataset that takes any split name, the usual ones and the one asked for.
func knownSplits(d Descriptor, split string) []string {
	if d.Splits != nil {
		return d.Splits
	}
	if slices.Contains(folderSplits, split) {
		return folderSplits
	}
	return append(slices.Clone(folderSplits), split)
}

// resolveInput returns where the split of s lies, for a dataset whose splits are places of
// their own (Descriptor.SplitPlaces):
//
//   - a dataset root, holding the place of at least one split: the split's place under it,
//     or an error naming the places it holds when the split's is not among them;
//   - a place named as one split's (a folder train/, the train tar): itself for that split,
//     and an error naming both for any other, since it would read that split's files;
//   - anything else (a folder of class folders under a name of its own): itself.
//
// A glob is the planner's to match.
func resolveInput(ctx context.Context, d Descriptor, s Spec) (string, error) {
	if d.SplitPlaces == nil || hasGlob(s.Input) {
		return s.Input, nil
	}
	splits := knownSplits(d, s.Split)
	var held []string
	for _, split := range splits {
		for _, rel := range d.SplitPlaces(split) {
			p := storage.Join(s.Input, rel)
			ok, err := storage.Present(ctx, p)
			if err != nil {
				return "", err
			}
			if !ok {
				continue
			}
			if split == s.Split {
				return p, nil
			}
			held = append(held, split+" ("+rel+")")
			break
		}
	}
	if len(held) > 0 {
		return "", fmt.Errorf("%s %s: the dataset root %s holds %s but no %s split (%s): add it, or give the split's own input",
			d.Name, s.Split, s.Input, strings.Join(held, ", "), s.Split, strings.Join(d.SplitPlaces(s.Split), " or "))
	}
	base := storage.Base(strings.TrimSuffix(s.Input, "/"))
	for _, split := range splits {
		for _, rel := range d.SplitPlaces(split) {
			if path.Base(rel) != base {
				continue
			}
			if split == s.Split {
				return s.Input, nil
			}
			return "", fmt.Errorf("%s %s: %s is the %s split's (%s), which the %s split must not read: give the dataset root that holds both, or the %s split's own input",
				d.Name, s.Split, s.Input, split, rel, s.Split, s.Split)
		}
	}
	return s.Input, nil
}

// Source is where a unit's records lie, as a path: the file it reads, its class folder, or
// its tar inside an outer tar (the outer tar's path, the member's name). The manifest lists
// the sources of every split, so that two splits that share images are found out (see
// Plan.Sources).
func (u Unit) Source() string {
	switch {
	case u.Kind == KindClassFolder:
		return joinPath(u.Path, u.Dir)
	case u.Member != "":
		return joinPath(u.Path, u.Member)
	}
	return u.Path
}

// Sources lists the sources of the plan's units (Unit.Source), once each, in plan order.
func (p Plan) Sources() []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range p.Units {
		if s := u.Source(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// SharedSource returns a source of a that is, holds or lies in a source of b, and that
// source of b: two splits that would read the same files. ok is false when they share none.
func SharedSource(a, b []string) (inA, inB string, ok bool) { return storage.FindOverlap(a, b) }
