package datasets

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/transforms"
)

func init() {
	for _, kind := range []string{KindCIFAR10, KindCIFAR100, KindSTL10} {
		RegisterKind(kind, Kind{Read: readFixedUnit, Fetch: func(ctx context.Context, f *Fetcher, refs []Ref, got func(int, Record) error) error {
			return fetchInRanges(ctx, f, refs, got, readFixedUnit, nil)
		}})
	}
	cifarSplits := []string{"train", "test"}
	cifarInput := func(folder string) string {
		return "the folder holding the .bin files (" + folder + ") or its parent, or a glob of .bin files (then they are the split)"
	}
	Register(Descriptor{
		Name: CIFAR10, Summary: "CIFAR-10 binary version (cifar-10-batches-bin)",
		Input:  cifarInput("cifar-10-batches-bin"),
		Splits: cifarSplits, Classes: fixedClasses(cifar10Classes),
		Published: map[string]int64{"train": 50000, "test": 10000},
		ViewSize:  32, Channels: 3,
		Mean: []float64{0.4914, 0.4822, 0.4465}, Std: []float64{0.2470, 0.2435, 0.2616},
		Augment: "simclr-cifar", Plan: planCIFAR,
	})
	Register(Descriptor{
		Name: CIFAR100, Summary: "CIFAR-100 binary version (cifar-100-binary)",
		Input:  cifarInput("cifar-100-binary"),
		Splits: cifarSplits,
		Classes: func(coarse bool) []string {
			if coarse {
				return slices.Clone(cifar100Coarse)
			}
			return slices.Clone(cifar100Fine)
		},
		Published: map[string]int64{"train": 50000, "test": 10000},
		ViewSize:  32, Channels: 3,
		Mean: []float64{0.5071, 0.4865, 0.4409}, Std: []float64{0.2673, 0.2564, 0.2762},
		Augment: "simclr-cifar", Plan: planCIFAR,
	})
	Register(Descriptor{
		Name: STL10, Summary: "STL-10 binary version (stl10_binary)",
		Input:  "the folder holding the .bin files (stl10_binary) or its parent",
		Splits: []string{"train", "test", "unlabeled", "train+unlabeled"}, Classes: fixedClasses(stl10Classes),
		Published: map[string]int64{"train": 5000, "test": 8000, "unlabeled": 100000, "train+unlabeled": 105000},
		ViewSize:  96, Channels: 3,
		Mean: []float64{0.4467, 0.4398, 0.4066}, Std: []float64{0.2603, 0.2566, 0.2713},
		Augment: "simclr-cifar", Plan: planSTL10,
	})
}

// Record layouts of the fixed-size binary formats.
const (
	cifarSide       = 32
	cifarPixels     = cifarSide * cifarSide * 3
	cifar10Record   = 1 + cifarPixels // label, 1024 R, 1024 G, 1024 B (rows top to bottom)
	cifar100Record  = 2 + cifarPixels // coarse label, fine label, pixels
	stl10Side       = 96
	stl10Record     = stl10Side * stl10Side * 3 // 3 planes, each column-major
	stl10NumClasses = 10
)

// recordSize returns the bytes of one record of a fixed-size unit kind.
func recordSize(kind string) int64 {
	switch kind {
	case KindCIFAR10:
		return cifar10Record
	case KindCIFAR100:
		return cifar100Record
	case KindSTL10:
		return stl10Record
	}
	return 0
}

// parseCIFAR10 decodes one CIFAR-10 record into its label and HWC image.
func parseCIFAR10(rec []byte) (int, transforms.Image, error) {
	if len(rec) != cifar10Record {
		return 0, transforms.Image{}, fmt.Errorf("CIFAR-10 record has %d bytes, want %d", len(rec), cifar10Record)
	}
	if rec[0] >= 10 {
		return 0, transforms.Image{}, fmt.Errorf("label %d outside 0..9", rec[0])
	}
	return int(rec[0]), planarToHWC(rec[1:], cifarSide), nil
}

// parseCIFAR100 decodes one CIFAR-100 record: the fine label (0..99), or the coarse one
// (0..19) when coarse. Both labels are checked, since either out of range means the record
// is not what it claims.
func parseCIFAR100(rec []byte, coarse bool) (int, transforms.Image, error) {
	if len(rec) != cifar100Record {
		return 0, transforms.Image{}, fmt.Errorf("CIFAR-100 record has %d bytes, want %d", len(rec), cifar100Record)
	}
	if rec[0] >= 20 {
		return 0, transforms.Image{}, fmt.Errorf("coarse label %d outside 0..19", rec[0])
	}
	if rec[1] >= 100 {
		return 0, transforms.Image{}, fmt.Errorf("fine label %d outside 0..99", rec[1])
	}
	label := int(rec[1])
	if coarse {
		label = int(rec[0])
	}
	return label, planarToHWC(rec[2:], cifarSide), nil
}

// planarToHWC turns 3 row-major planes (R, G, B) of a side×side image into HWC.
func planarToHWC(planes []byte, side int) transforms.Image {
	m := transforms.NewImage(side, side, 3)
	n := side * side
	r, g, b := planes[:n], planes[n:2*n], planes[2*n:3*n]
	for i := range n {
		m.Pix[3*i], m.Pix[3*i+1], m.Pix[3*i+2] = r[i], g[i], b[i]
	}
	return m
}

// parseSTL10 decodes one STL-10 image (3 planes, each stored column by column, as MATLAB
// wrote them) and its label byte y (1..10 on disk, 0..9 returned); an unlabelled record has
// labelled false and gets -1.
func parseSTL10(rec []byte, y byte, labelled bool) (int, transforms.Image, error) {
	if len(rec) != stl10Record {
		return 0, transforms.Image{}, fmt.Errorf("STL-10 image has %d bytes, want %d", len(rec), stl10Record)
	}
	label := -1
	if labelled {
		if y < 1 || y > stl10NumClasses {
			return 0, transforms.Image{}, fmt.Errorf("label %d outside 1..10 (the label file counts from 1)", y)
		}
		label = int(y) - 1
	}
	const side, n = stl10Side, stl10Side * stl10Side
	m := transforms.NewImage(side, side, 3)
	for c := range 3 {
		plane := rec[c*n : (c+1)*n]
		for x := range side {
			col := plane[x*side : (x+1)*side]
			for y, v := range col {
				m.Pix[(y*side+x)*3+c] = v
			}
		}
	}
	return label, m, nil
}

// cifarFiles returns the .bin files of a CIFAR split, the folder's name in the published
// archive and the number of classes.
func cifarFiles(dataset, split string) (names []string, archiveDir string) {
	if dataset == CIFAR10 {
		if split == "test" {
			return []string{"test_batch.bin"}, "cifar-10-batches-bin"
		}
		return []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"}, "cifar-10-batches-bin"
	}
	return []string{split + ".bin"}, "cifar-100-binary"
}

// findFiles returns the paths of names in dir or, when dir lacks the first of them but
// dir/sub has it, in dir/sub (the folder the published archive extracts to). It refuses,
// naming them, when any is missing.
func findFiles(ctx context.Context, what, dir, sub string, names []string) ([]string, error) {
	base := dir
	ok, err := storage.Exists(ctx, storage.Join(dir, names[0]))
	if err != nil {
		return nil, err
	}
	if !ok {
		inSub, err := storage.Exists(ctx, storage.Join(dir, sub, names[0]))
		if err != nil {
			return nil, err
		}
		if inSub {
			base = storage.Join(dir, sub)
		}
	}
	var paths, missing []string
	for _, n := range names {
		p := storage.Join(base, n)
		ok, err := storage.Exists(ctx, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, n)
		}
		paths = append(paths, p)
	}
	if len(missing) > 0 {
		where := base
		if base == dir {
			where = fmt.Sprintf("%s (and its %s subfolder)", dir, sub)
		}
		return nil, fmt.Errorf("%s: %s lacks %s", what, where, strings.Join(missing, ", "))
	}
	return paths, nil
}

// publishedPerFile is the records of each of the files of a split in the published dataset:
// the descriptor's count of the split, shared evenly by its files (CIFAR-10's five batches).
func publishedPerFile(s Spec, files int) (int64, error) {
	_, d, err := s.Resolve()
	if err != nil {
		return 0, err
	}
	return d.Published[s.Split] / int64(files), nil
}

// countRecords returns the records of a fixed-size file, refusing one whose size is not a
// whole number of records.
func countRecords(ctx context.Context, what, p string, size int64) (int64, error) {
	n, err := storage.Size(ctx, p)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: %s is empty", what, p)
	}
	if n%size != 0 {
		return 0, fmt.Errorf("%s: %s has %d bytes, not a whole number of %d-byte records (%d records and %d bytes over): "+
			"the file is truncated or not in this format, so none of it is read", what, p, n, size, n/size, n%size)
	}
	return n / size, nil
}

// cutCopyShare is the share of a published file's records that a copy of it may lack and
// still be taken for a cut copy rather than a sample: a headerless file (CIFAR, STL-10) cut at
// a record boundary is a whole number of records, so only its count against the published
// file's gives it away.
const cutCopyShare = 100 // 1%

// checkPublishedFile refuses a file that holds fewer records than the published file (want,
// 0 when unknown) but no fewer than all of them less 1%: a cut copy. Smaller files are
// samples (tests, trials), which MakePlan reads with a warning.
func checkPublishedFile(what, p string, n, want int64) error {
	if want <= 0 || n >= want || n < want-want/cutCopyShare {
		return nil
	}
	return fmt.Errorf("%s: %s holds %d records, %d fewer than the published file's %d: the copy is cut short, so none of it is read "+
		"(a sample must hold under 99%% of the published records)", what, p, n, want-n, want)
}

func planCIFAR(ctx context.Context, s Spec) (Plan, error) {
	what := s.Dataset + " " + s.Split
	kind, numClasses := KindCIFAR10, 10
	if s.Dataset == CIFAR100 {
		kind, numClasses = KindCIFAR100, 100
		if s.CoarseLabels {
			numClasses = 20
		}
	}
	classes, err := ClassNames(s.Dataset, s.CoarseLabels)
	if err != nil {
		return Plan{}, err
	}
	var paths []string
	var perFile int64 // the published file's records; unknown for a glob
	if hasGlob(s.Input) {
		if paths, err = listGlob(ctx, s.Input); err != nil {
			return Plan{}, fmt.Errorf("%s: %w", what, err)
		}
	} else {
		names, sub := cifarFiles(s.Dataset, s.Split)
		if paths, err = findFiles(ctx, what, s.Input, sub, names); err != nil {
			return Plan{}, err
		}
		if perFile, err = publishedPerFile(s, len(names)); err != nil {
			return Plan{}, err
		}
	}
	p := Plan{Classes: classes}
	var index int64
	for _, path := range paths {
		n, err := countRecords(ctx, what, path, recordSize(kind))
		if err != nil {
			return Plan{}, err
		}
		if err := checkPublishedFile(what, path, n, perFile); err != nil {
			return Plan{}, err
		}
		chunks(n, int64(s.UnitRecords), func(first, count int64) {
			p.Units = append(p.Units, Unit{
				Kind: kind, Split: s.Split, Path: path, First: first, Records: count, Exact: true, RecordBytes: recordSize(kind),
				Index: index + first, KeyBase: index + first, NumClasses: numClasses, CoarseLabels: s.CoarseLabels,
			})
		})
		index += n
	}
	return p, nil
}

func planSTL10(ctx context.Context, s Spec) (Plan, error) {
	what := "stl10 " + s.Split
	parts := []string{s.Split}
	if s.Split == "train+unlabeled" {
		parts = []string{"train", "unlabeled"}
	}
	p := Plan{Classes: stl10Classes}
	var index int64
	for _, part := range parts {
		names := []string{part + "_X.bin", part + "_y.bin"}
		if part == "unlabeled" {
			names = names[:1]
		}
		paths, err := findFiles(ctx, what, s.Input, "stl10_binary", names)
		if err != nil {
			return Plan{}, err
		}
		n, err := countRecords(ctx, what, paths[0], stl10Record)
		if err != nil {
			return Plan{}, err
		}
		want, err := publishedPerFile(Spec{Dataset: s.Dataset, Split: part}, 1)
		if err != nil {
			return Plan{}, err
		}
		if err := checkPublishedFile(what, paths[0], n, want); err != nil {
			return Plan{}, err
		}
		labels := ""
		if len(paths) == 2 {
			labels = paths[1]
			size, err := storage.Size(ctx, labels)
			if err != nil {
				return Plan{}, err
			}
			if size != n {
				return Plan{}, fmt.Errorf("%s: %s holds %d images but %s holds %d labels (one byte each)", what, paths[0], n, labels, size)
			}
		}
		chunks(n, int64(s.UnitRecords), func(first, count int64) {
			p.Units = append(p.Units, Unit{
				Kind: KindSTL10, Split: part, Path: paths[0], LabelsPath: labels, First: first, Records: count,
				Exact: true, RecordBytes: stl10Record, Index: index + first, KeyBase: first, NumClasses: stl10NumClasses,
			})
		})
		index += n
	}
	return p, nil
}

func readFixedUnit(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (int64, error) {
	return 0, readFixed(ctx, u, emit, bad)
}

// readFixed reads a range of records of a CIFAR or STL-10 file.
func readFixed(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) error {
	size := recordSize(u.Kind)
	r, err := openRange(ctx, u.Path, u.First*size, u.Records*size)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.f.Size()%size != 0 {
		return fmt.Errorf("%s: has %d bytes, not a whole number of %d-byte records", u.Path, r.f.Size(), size)
	}
	var labels io.Reader
	if u.LabelsPath != "" {
		lr, err := openRange(ctx, u.LabelsPath, u.First, u.Records)
		if err != nil {
			return err
		}
		defer lr.Close()
		if lr.f.Size() != r.f.Size()/size {
			return fmt.Errorf("%s holds %d labels but %s holds %d images", u.LabelsPath, lr.f.Size(), u.Path, r.f.Size()/size)
		}
		labels = lr
	}
	buf := make([]byte, size)
	var y [1]byte
	for i := range u.Records {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		offset := (u.First + i) * size
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("%s: reading record %d at byte %d: %w", u.Path, u.First+i, offset, err)
		}
		if labels != nil {
			if _, err := io.ReadFull(labels, y[:]); err != nil {
				return fmt.Errorf("%s: reading label %d: %w", u.LabelsPath, u.First+i, err)
			}
		}
		var label int
		var img transforms.Image
		switch u.Kind {
		case KindCIFAR10:
			label, img, err = parseCIFAR10(buf)
		case KindCIFAR100:
			label, img, err = parseCIFAR100(buf, u.CoarseLabels)
		case KindSTL10:
			label, img, err = parseSTL10(buf, y[0], labels != nil)
		}
		key := fmt.Sprintf("%s/%06d", u.Split, u.KeyBase+i)
		if err != nil {
			source := u.Path
			if labels != nil && u.Kind == KindSTL10 {
				source = u.LabelsPath // the label is what is wrong
				offset = u.First + i
			}
			if err := bad(BadRecord{Source: source, Position: Position{Offset: offset}, Key: key, Reason: err.Error()}); err != nil {
				return err
			}
			continue
		}
		rec := Record{Key: key, Index: u.Index + i, Label: label, Source: u.Path, Offset: offset,
			Pixels: img, Width: img.W, Height: img.H}
		if err := emit(rec); err != nil {
			return err
		}
	}
	return nil
}
