package datasets

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// Dataset names, as --dataset takes them: each is registered (Register) by the file that
// reads its format.
const (
	CIFAR10      = "cifar10"
	CIFAR100     = "cifar100"
	STL10        = "stl10"
	ImageNet     = "imagenet"
	ImageNet100  = "imagenet100"
	Folder       = "folder" // one subfolder per class, JPEG and PNG files
	IDX          = "idx"    // MNIST-style IDX files with numeric class names
	MNIST        = "mnist"
	FashionMNIST = "fashion-mnist"
)

// DefaultUnitRecords is the records (fixed-size formats) or files (folders) a unit holds
// when Spec.UnitRecords is zero: small enough to spread a dataset over many workers, large
// enough that opening files does not dominate.
const DefaultUnitRecords = 5000

// Spec says what to read.
type Spec struct {
	Dataset string // one of Names()
	// Input is where the dataset lies, local or gs://: what it may be is each dataset's own
	// (Descriptor.Input).
	Input string
	// Split is one of the dataset's Descriptor.Splits; "" means "train". For Folder it is any
	// name: the subfolder of a dataset root, and the prefix of the keys.
	Split string
	// CoarseLabels makes CIFAR-100 records carry the 20 coarse labels instead of the 100 fine ones.
	CoarseLabels bool
	// LabelsFile labels a flat ImageNet val folder (see ParseValLabels for the formats). When
	// empty, LOC_val_solution.csv is looked for in Input and in its parent.
	LabelsFile string
	// UnitRecords is how many records (fixed-size formats) or image files (folders) one unit
	// holds at most; 0 means DefaultUnitRecords. Tars are one unit each.
	UnitRecords int
	// MaxFileBytes is the largest image file or tar member read; larger ones are bad records.
	// 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// Limits bound the image headers Read accepts (and are the natural limits to Decode with).
	Limits Limits

	// root is the input as given, when MakePlan resolved the split's place under it (a
	// dataset root): where files that describe the whole dataset (LOC_val_solution.csv) lie.
	root string
	// desc is Dataset's descriptor, once Resolve has looked it up.
	desc *Descriptor
}

// Resolve returns the spec holding its dataset's descriptor, looked up once for everything
// downstream that reads it (planning, the published counts), and the descriptor.
func (s Spec) Resolve() (Spec, Descriptor, error) {
	if s.desc != nil && s.desc.Name == s.Dataset {
		return s, *s.desc, nil
	}
	d, err := Lookup(s.Dataset)
	if err != nil {
		return s, Descriptor{}, err
	}
	s.desc = &d
	return s, d, nil
}

func (s Spec) withDefaults() Spec {
	if s.Split == "" {
		s.Split = "train"
	}
	if s.UnitRecords <= 0 {
		s.UnitRecords = DefaultUnitRecords
	}
	if s.MaxFileBytes <= 0 {
		s.MaxFileBytes = DefaultMaxFileBytes
	}
	if s.Limits.MaxPixels <= 0 {
		s.Limits.MaxPixels = DefaultMaxPixels
	}
	return s
}

// Unit kinds: how Read parses a unit.
const (
	KindCIFAR10     = "cifar10"      // a range of 3,073-byte records of a CIFAR-10 .bin file
	KindCIFAR100    = "cifar100"     // a range of 3,074-byte records of a CIFAR-100 .bin file
	KindSTL10       = "stl10"        // a range of 27,648-byte images of an STL-10 _X.bin file (and its _y.bin)
	KindIDX         = "idx"          // a range of images of an IDX file pair, gzipped or not
	KindClassFolder = "class-folder" // a range of the sorted image files of one class folder
	KindFiles       = "files"        // a list of image files with their labels (flat ImageNet val)
	KindTar         = "tar"          // a tar of images of one class, alone or inside another tar
)

// Unit is an independent piece of a split: Read streams its records. Units hold only plain
// exported fields, so they survive JSON (Beam encodes DoFn inputs that way), and they stay
// small (a folder unit names its folder and a range of its sorted listing, not its files), so
// even ImageNet's units fit in a pipeline graph.
type Unit struct {
	Kind  string // one of the Kind constants
	Split string // the split named in the keys (for STL-10 train+unlabeled: train or unlabeled)
	// Path is the file read (.bin, IDX images, tar), or the folder for folder units.
	Path string
	// LabelsPath is the label file of a fixed-size unit (STL-10 _y.bin, IDX labels); "" for
	// STL-10 unlabeled.
	LabelsPath string
	// First is the unit's first record in its file, or its first file in the sorted listing
	// of Dir; Records is how many it holds (an estimate for tars, see Exact).
	First, Records int64
	// Exact is false when Records is an estimate (tar units: members are known when read).
	Exact bool
	// RecordBytes is the size of one record in Path for units whose records lie side by
	// side in one large file, placed by their index (CIFAR, STL-10, IDX): a pipeline fetches
	// many of those again at once, in ranges, and sizes what it holds by it. 0 for records
	// that are files or tar members of their own, fetched one by one.
	RecordBytes int64
	// Index is the split-wide index of the unit's first record (see Record.Index).
	Index int64
	// KeyBase is the number in the key of the unit's first record ("train/%06d") for the
	// fixed-size formats.
	KeyBase int64
	// NumClasses bounds the labels of fixed-size formats: a label outside 0..NumClasses-1 is
	// a bad record.
	NumClasses int
	// CoarseLabels selects CIFAR-100's coarse labels.
	CoarseLabels bool

	// Dir is the class folder of a class-folder unit, relative to Path, slash-separated.
	// DirFiles is the number of image files the folder held when planned: Read refuses a
	// folder that has changed since.
	Dir      string
	DirFiles int64
	// Label is the label of every record of class-folder and tar units.
	Label int
	// Files and Labels are the image files of a files unit (relative to Path) and their
	// labels; a label of NoLabel makes the file a bad record (the labels file misses it).
	Files  []string
	Labels []int

	// Offset and Length are the tar's byte range in Path: the whole file for a tar of its
	// own, the member's data for a tar inside another.
	Offset, Length int64
	// Member is the name of the inner tar in Path when the tar is nested, else "".
	Member string
	// KeyDir is the folder the tar's members are keyed under (the synset), so that a tar's
	// records get the same keys as the extracted folder's.
	KeyDir string

	// MaxFileBytes and Limits: see Spec.
	MaxFileBytes int64
	Limits       Limits
}

func (u Unit) maxFileBytes() int64 {
	if u.MaxFileBytes <= 0 {
		return DefaultMaxFileBytes
	}
	return u.MaxFileBytes
}

// Head returns the unit cut to its first n records (n at most Records), as when a run is
// limited to the first records of a split.
func (u Unit) Head(n int64) Unit {
	u.Records = min(u.Records, n)
	if u.Files != nil {
		u.Files, u.Labels = u.Files[:u.Records], u.Labels[:u.Records]
	}
	return u
}

// NoLabel marks, in Unit.Labels, a file the labels file does not mention.
const NoLabel = -2

func (u Unit) String() string {
	switch u.Kind {
	case KindClassFolder:
		return fmt.Sprintf("%s %s files %d-%d of %d", u.Kind, joinPath(u.Path, u.Dir), u.First, u.First+u.Records-1, u.DirFiles)
	case KindFiles:
		return fmt.Sprintf("%s %s (%d files from %s)", u.Kind, u.Path, len(u.Files), firstOr(u.Files))
	case KindTar:
		if u.Member != "" {
			return fmt.Sprintf("%s %s in %s", u.Kind, u.Member, u.Path)
		}
		return fmt.Sprintf("%s %s", u.Kind, u.Path)
	}
	return fmt.Sprintf("%s %s records %d-%d", u.Kind, u.Path, u.First, u.First+u.Records-1)
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// Plan is the work of reading one split: its units, classes and size.
type Plan struct {
	Dataset string
	Split   string
	// Input is where the split was read from: Spec.Input, or the split's place under it
	// when Spec.Input is a dataset root (see Descriptor.SplitPlaces).
	Input string
	// Classes names the labels: Classes[label]. ImageNet classes are synsets (n01440764).
	Classes []string
	// Units, in split order: reading them in order yields the records in Index order.
	Units []Unit
	// Records is the split's record count: exact when Exact, else an estimate (tars), for
	// progress bars.
	Records int64
	Exact   bool
	// Ignored counts files under a folder input that are not records: non-image files and
	// files outside class folders. IgnoredExamples names up to ten of them.
	Ignored         int64
	IgnoredExamples []string
	// Warnings are worth a log line: counts that differ from the published dataset's, say.
	Warnings []string
}

func (p *Plan) ignore(name string) {
	p.Ignored++
	if len(p.IgnoredExamples) < 10 {
		p.IgnoredExamples = append(p.IgnoredExamples, name)
	}
}

// MakePlan checks the input of a split and divides it into units. It reads only listings,
// file sizes and headers (for gzipped IDX files, possibly the whole stream once to confirm a
// size; for an outer ImageNet tar, its member headers), never the images.
//
// It refuses, with an error naming the file and what is wrong: an unknown dataset or split,
// a missing file of the split, an input holding no records, a fixed-size file whose size is
// not a whole number of records (a truncated or foreign file: nothing of it is read, since
// even its "complete" records could be misaligned), label and image files that disagree on
// the record count, an IDX file with the wrong magic number, a tar member whose path escapes
// the archive, folders that do not match the dataset's classes, and an input that is
// another split's (see resolveInput): the val split of the train folder, say.
func MakePlan(ctx context.Context, spec Spec) (Plan, error) {
	spec, d, err := spec.withDefaults().Resolve()
	if err != nil {
		return Plan{}, err
	}
	if spec.Input == "" {
		return Plan{}, fmt.Errorf("%s: no input given", spec.Dataset)
	}
	if d.Splits != nil && !slices.Contains(d.Splits, spec.Split) {
		return Plan{}, usage.Errorf("--split=%s: %s has no split %q; want one of %s", spec.Split, spec.Dataset, spec.Split, strings.Join(d.Splits, ", "))
	}
	// A glob is the planner's to match; anything else must be there, or every dataset's
	// planner would report the first file it looks for as missing.
	if !strings.ContainsAny(spec.Input, "*?[") {
		ok, err := storage.Present(ctx, spec.Input)
		if err != nil {
			return Plan{}, err
		}
		if !ok {
			return Plan{}, fmt.Errorf("%s: input %s does not exist", spec.Dataset, spec.Input)
		}
	}
	place, err := resolveInput(ctx, d, spec)
	if err != nil {
		return Plan{}, err
	}
	if place != spec.Input {
		spec.root, spec.Input = spec.Input, place
	}
	p, err := d.Plan(ctx, spec)
	if err != nil {
		return Plan{}, err
	}
	p.Dataset, p.Split, p.Input = spec.Dataset, spec.Split, spec.Input
	p.Exact = true
	for i := range p.Units {
		u := &p.Units[i]
		u.MaxFileBytes, u.Limits = spec.MaxFileBytes, spec.Limits
		p.Records += u.Records
		p.Exact = p.Exact && u.Exact
	}
	if len(p.Units) == 0 || p.Records == 0 {
		return Plan{}, fmt.Errorf("%s %s: %s holds no records", spec.Dataset, spec.Split, spec.Input)
	}
	if want := d.Published[spec.Split]; want > 0 && p.Exact && p.Records != want {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%s %s has %d records; the published dataset has %d",
			spec.Dataset, spec.Split, p.Records, want))
	}
	return p, nil
}

// chunks splits n items into ranges of at most size.
func chunks(n, size int64, f func(first, count int64)) {
	for first := int64(0); first < n; first += size {
		f(first, min(size, n-first))
	}
}
