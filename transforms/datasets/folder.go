package datasets

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
)

func init() {
	RegisterKind(KindClassFolder, Kind{
		Read: func(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (int64, error) {
			return 0, readClassFolder(ctx, u, emit, bad)
		},
		Fetch: fetchClassFolder,
	})
	RegisterKind(KindFiles, Kind{
		Read: func(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (int64, error) {
			return 0, readFiles(ctx, u, u.Files, u.Labels, emit, bad)
		},
		Fetch: fetchFiles,
	})
	Register(Descriptor{
		Name: Folder, Summary: "a folder of class subfolders of JPEG and PNG files (labels: sorted folder names)",
		Input:    "the dataset root holding train/, val/ or test/, or one split's folder of class subfolders",
		ViewSize: 224, Channels: 3, Mean: imagenetMean, Std: imagenetStd,
		Augment: "simclr-imagenet", SplitPlaces: func(split string) []string { return []string{split} }, Plan: planFolder,
	})
}

// classListing is an image folder's files grouped by class folder.
type classListing struct {
	classes []string            // sorted class folder names, empty ones included
	files   map[string][]string // class -> image files, relative to the class folder, sorted
	empty   []string            // class folders without an image file
}

// listClasses lists root and groups its image files by top-level folder, as torchvision's
// ImageFolder does: a file anywhere under a class folder belongs to that class; files
// directly in root and files that are not JPEG or PNG (by extension, in any case) are not
// records and go to ignore, and so do hidden files and folders (.ipynb_checkpoints). Every
// other top-level folder is a class, whether it holds images or not, so that a class keeps
// its label in a split where its folder is empty.
func listClasses(ctx context.Context, root string, ignore func(rel string)) (classListing, error) {
	all, err := listTree(ctx, root)
	if err != nil {
		return classListing{}, err
	}
	folders, err := listSubfolders(ctx, root)
	if err != nil {
		return classListing{}, err
	}
	if len(all) == 0 && len(folders) == 0 {
		return classListing{}, fmt.Errorf("%s holds no files", root)
	}
	l := classListing{files: map[string][]string{}}
	for _, class := range folders {
		l.classes = append(l.classes, class)
		l.files[class] = nil
	}
	for _, rel := range all {
		class, inner, ok := strings.Cut(rel, "/")
		if !ok || hasHiddenPart(rel) {
			ignore(rel)
			continue
		}
		if _, seen := l.files[class]; !seen {
			l.classes = append(l.classes, class)
			l.files[class] = nil
		}
		if !isImageName(inner) {
			ignore(rel)
			continue
		}
		l.files[class] = append(l.files[class], inner)
	}
	slices.Sort(l.classes)
	for _, c := range l.classes {
		if len(l.files[c]) == 0 {
			l.empty = append(l.empty, c)
		}
	}
	return l, nil
}

// classUnits appends the units of one class folder to p: ranges of its sorted files.
func classUnits(p *Plan, s Spec, class string, label int, n int64, index *int64) {
	chunks(n, int64(s.UnitRecords), func(first, count int64) {
		p.Units = append(p.Units, Unit{
			Kind: KindClassFolder, Split: s.Split, Path: s.Input, Dir: class, DirFiles: n,
			First: first, Records: count, Exact: true, Label: label, Index: *index + first,
		})
	})
	*index += n
}

func planFolder(ctx context.Context, s Spec) (Plan, error) {
	var p Plan
	l, err := listClasses(ctx, s.Input, p.ignore)
	if err != nil {
		return Plan{}, fmt.Errorf("folder: %w", err)
	}
	if len(l.classes) == 0 {
		return Plan{}, fmt.Errorf("folder: %s has no class folders (want one subfolder of JPEG or PNG files per class)", s.Input)
	}
	if len(l.empty) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("folder: %s: class folders without a JPEG or PNG file keep their labels with no records: %s",
			s.Input, strings.Join(l.empty, ", ")))
	}
	for _, class := range l.classes {
		p.Classes = append(p.Classes, rawname.Text(class)) // the units keep the folder's own name
	}
	var index int64
	for label, class := range l.classes {
		classUnits(&p, s, class, label, int64(len(l.files[class])), &index)
	}
	return p, nil
}

func readClassFolder(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) error {
	dir := joinPath(u.Path, u.Dir)
	all, err := listTree(ctx, dir)
	if err != nil {
		return err
	}
	files := slices.DeleteFunc(all, func(rel string) bool { return !isImageName(rel) || hasHiddenPart(rel) })
	if int64(len(files)) != u.DirFiles {
		return fmt.Errorf("%s: holds %d image files, %d when planned: the folder changed", dir, len(files), u.DirFiles)
	}
	if u.First+u.Records > int64(len(files)) {
		return fmt.Errorf("%s: unit reads files %d to %d of %d", dir, u.First, u.First+u.Records-1, len(files))
	}
	rels := files[u.First : u.First+u.Records]
	return readImageFiles(ctx, u, dir, u.Dir+"/", rels, func(int) int { return u.Label }, func(_ int, rel string) string { return rel }, emit, bad)
}

// fetchClassFolder fetches image files of class folders again: a reference is the file's
// path in its class folder.
func fetchClassFolder(ctx context.Context, f *Fetcher, refs []Ref, got func(int, Record) error) error {
	for i, r := range refs {
		u := f.Unit(r)
		rec, err := fetchImageFile(ctx, u, joinPath(u.Path, u.Dir), u.Dir+"/", r.Ref, u.Label, r.Index)
		if err != nil {
			return err
		}
		rec.Ref = r.Ref
		if err := got(i, rec); err != nil {
			return err
		}
	}
	return nil
}

// fetchFiles fetches image files of files units again: a reference is the file's label and
// its path in the unit's folder, "LABEL:PATH" (the unit's lists do not travel, see ForFetch).
func fetchFiles(ctx context.Context, f *Fetcher, refs []Ref, got func(int, Record) error) error {
	for i, r := range refs {
		u := f.Unit(r)
		l, rel, ok := strings.Cut(r.Ref, ":")
		label, err := strconv.Atoi(l)
		if !ok || err != nil {
			return fmt.Errorf("%s: reference %q is not LABEL:PATH", u, r.Ref)
		}
		rec, err := fetchImageFile(ctx, u, u.Path, "", rel, label, r.Index)
		if err != nil {
			return err
		}
		rec.Ref = r.Ref
		if err := got(i, rec); err != nil {
			return err
		}
	}
	return nil
}

// fetchImageFile reads an image file again as readImageFiles read it.
func fetchImageFile(ctx context.Context, u *Unit, root, keyDir, rel string, label int, index int64) (Record, error) {
	p := joinPath(root, rel)
	data, err := readSmall(ctx, p, u.maxFileBytes())
	if err != nil {
		return Record{}, err
	}
	return Record{Key: rawname.Text(u.Split + "/" + keyDir + rel), Index: index, Label: label, Source: p, Encoded: data}, nil
}

func readFiles(ctx context.Context, u Unit, files []string, labels []int, emit func(Record) error, bad func(BadRecord) error) error {
	if len(files) != len(labels) {
		return fmt.Errorf("%s: unit has %d files and %d labels", u, len(files), len(labels))
	}
	return readImageFiles(ctx, u, u.Path, "", files, func(i int) int { return labels[i] },
		func(i int, rel string) string { return strconv.Itoa(labels[i]) + ":" + rel }, emit, bad)
}

// readImageFiles reads image files under root, checking each header. keyDir prefixes the
// relative paths in keys (the class folder when root is one); ref makes the references.
func readImageFiles(ctx context.Context, u Unit, root, keyDir string, rels []string, label func(int) int,
	ref func(i int, rel string) string, emit func(Record) error, bad func(BadRecord) error) error {
	for i, rel := range rels {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := joinPath(root, rel)
		key := rawname.Text(u.Split + "/" + keyDir + rel)
		report := func(reason string) error {
			return bad(BadRecord{Source: p, Position: Position{File: true}, Key: key, Reason: reason})
		}
		if label(i) == NoLabel {
			if err := report(fmt.Sprintf("the labels file %s has no label for %s", u.LabelsPath, path.Base(rel))); err != nil {
				return err
			}
			continue
		}
		data, err := readSmall(ctx, p, u.maxFileBytes())
		if errors.Is(err, errTooLarge) {
			if err := report(fmt.Sprintf("larger than the limit of %d bytes", u.maxFileBytes())); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		h, err := DecodeHeader(data, formatOfName(rel), u.Limits)
		if err != nil {
			if err := report(err.Error()); err != nil {
				return err
			}
			continue
		}
		rec := Record{Key: key, Index: u.Index + int64(i), Label: label(i), Source: p, Ref: ref(i, rel),
			Encoded: data, Format: h.Format, Width: h.Width, Height: h.Height}
		if err := emit(rec); err != nil {
			return err
		}
	}
	return nil
}

// formatOfName is the format a file's extension claims.
func formatOfName(name string) string {
	if strings.EqualFold(path.Ext(name), ".png") {
		return FormatPNG
	}
	return FormatJPEG
}
