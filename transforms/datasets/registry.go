package datasets

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// Descriptor is everything the toolkit knows about one dataset, in one place: the file that
// reads the dataset's format registers it (Register, from an init function), and
// preprocessing, the trainer's input normalisation, reproduce's configuration checks and the
// command line's help all read it. A dataset absent from the registry is an error everywhere,
// never a silent default.
//
// Adding a dataset is one file: its reader (a Plan function returning units of an existing
// kind, or of a Kind of its own, registered with RegisterKind) and one Register call.
type Descriptor struct {
	// Name is what --dataset and a config's dataset.name take.
	Name string
	// Summary says in a few words what the input is, for help texts.
	Summary string
	// Input says what Spec.Input (--input, a config's dataset.input) may be for this
	// dataset, local or gs://: the layouts its Plan accepts.
	Input string
	// Splits lists the split names; nil means any name (an image folder: the split only
	// prefixes the keys). The first is the default.
	Splits []string
	// Classes names the labels (Classes[label]) of a dataset with a fixed class list; nil when
	// the input decides them (MakePlan returns them in Plan.Classes).
	Classes func(coarse bool) []string
	// Published is the record count of each split of the published dataset: MakePlan warns
	// when an input differs.
	Published map[string]int64
	// ViewSize is the side, in pixels, of the views the dataset is usually trained at.
	ViewSize int
	// Channels is the channel count of its images as the readers emit them.
	Channels int
	// Mean and Std are the per-channel mean and standard deviation of its pixels scaled to
	// [0, 1], which the trainer normalises its input with.
	Mean, Std []float64
	// Augment is the augmentation preset for pretraining views (package augment's names).
	Augment string
	// SplitPlaces says where each split lies under the dataset's root, for datasets whose
	// splits are places of their own (ImageNet's train/ and val/, an image folder's train/,
	// val/ and test/): the paths relative to the root where split may be, in the order they
	// are tried. Nil for datasets whose splits are files of one folder told apart by their
	// names (CIFAR, STL-10, IDX), whose input is always that folder. MakePlan resolves the
	// split's place from it (see resolveInput) before Plan runs.
	SplitPlaces func(split string) []string
	// Plan divides one split of an input into units (MakePlan calls it once the split is
	// checked against Splits, its place resolved and the spec has its defaults).
	Plan func(ctx context.Context, spec Spec) (Plan, error)
}

// The registries of datasets and of unit kinds: the toolkit's one registry shape.
var (
	datasetRegistry = registry.New[Descriptor]("dataset")
	kindRegistry    = registry.New[Kind]("dataset unit kind")
)

// UnitReader streams the records of one unit of its kind (see Read for the contract); it
// returns how many entries of the unit were not records (a tar's non-image members).
type UnitReader func(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (ignored int64, err error)

// Kind is a unit format, named by Unit.Kind: how a unit's records are read, and how a record
// is found again by the reference its reader gave it. A pipeline reads every unit once,
// carries each record's reference (never its pixels) to where the record is written, and
// fetches it there: the kind alone knows what the reference holds.
type Kind struct {
	// Read streams the records of a unit, each with the Record.Ref that Fetch finds it
	// again by.
	Read UnitReader
	// Fetch reads again the records that refs name, all of units of this kind, and passes
	// each to got with its place in refs. It calls got from the calling goroutine, in any
	// order, at most once per reference; a record it cannot find again (a record that has
	// gone bad) is left out, for the caller to report. It returns an error when the input
	// cannot be read. Its records carry what Read gave (key, index, label, source,
	// position, pixels or encoded bytes) except an encoded image's Format, Width and Height:
	// the step that decodes reads the header again.
	Fetch func(ctx context.Context, f *Fetcher, refs []Ref, got func(i int, r Record) error) error
}

// RegisterKind adds a unit kind, so that a dataset whose Plan makes units of a format of its
// own is still one file. It panics when the name is taken or the kind incomplete.
func RegisterKind(name string, k Kind) {
	if k.Read == nil || k.Fetch == nil {
		panic(fmt.Sprintf("datasets.RegisterKind: kind %q without a reader or a fetcher", name))
	}
	kindRegistry.Register(name, k)
}

func kindOf(name string) (Kind, bool) { return kindRegistry.Lookup(name) }

// Register adds a dataset. It panics on a descriptor that is incomplete or whose name is
// taken: both are programming errors, found when the binary starts.
func Register(d Descriptor) {
	if err := d.validate(); err != nil {
		panic(fmt.Sprintf("datasets.Register: %v", err))
	}
	datasetRegistry.Register(d.Name, d)
}

func (d Descriptor) validate() error {
	switch {
	case d.Name == "" || strings.ToLower(d.Name) != d.Name || strings.ContainsAny(d.Name, " ,"):
		return fmt.Errorf("dataset name %q: want a lower-case name without spaces or commas", d.Name)
	case d.Plan == nil:
		return fmt.Errorf("dataset %q has no Plan function", d.Name)
	case d.Input == "":
		return fmt.Errorf("dataset %q does not say what its input is", d.Name)
	case d.ViewSize < 1:
		return fmt.Errorf("dataset %q: view size %d", d.Name, d.ViewSize)
	case d.Channels != 1 && d.Channels != 3:
		return fmt.Errorf("dataset %q: %d channels, want 1 or 3", d.Name, d.Channels)
	case len(d.Mean) != d.Channels || len(d.Std) != d.Channels:
		return fmt.Errorf("dataset %q: %d means and %d standard deviations for %d channels", d.Name, len(d.Mean), len(d.Std), d.Channels)
	case d.Augment == "":
		return fmt.Errorf("dataset %q has no augmentation preset", d.Name)
	}
	for _, s := range d.Std {
		if !(s > 0) {
			return fmt.Errorf("dataset %q: standard deviation %g", d.Name, s)
		}
	}
	for split := range d.Published {
		if d.Splits != nil && !slices.Contains(d.Splits, split) {
			return fmt.Errorf("dataset %q: published count for unknown split %q", d.Name, split)
		}
	}
	return nil
}

// Lookup returns the descriptor of a dataset, or an error listing the known names.
func Lookup(name string) (Descriptor, error) {
	d, ok := datasetRegistry.Lookup(name)
	if !ok {
		return Descriptor{}, fmt.Errorf("unknown dataset %q: want one of %s", name, strings.Join(Names(), ", "))
	}
	return d, nil
}

// Names returns the registered dataset names, sorted.
func Names() []string {
	names := datasetRegistry.Names() // in the order of the files' init functions
	slices.Sort(names)
	return names
}

// ClassNames returns the class names of a dataset with a fixed class list (labels index it);
// coarse selects CIFAR-100's 20 superclasses. Datasets that take their classes from the input
// (image folders, raw IDX files) have none here: MakePlan returns them.
func ClassNames(dataset string, coarse bool) ([]string, error) {
	d, err := Lookup(dataset)
	if err != nil {
		return nil, err
	}
	if d.Classes == nil {
		return nil, fmt.Errorf("dataset %q has no fixed class list", dataset)
	}
	return d.Classes(coarse), nil
}

// Normalization returns the per-channel mean and standard deviation of a dataset's pixels
// (scaled to [0, 1]) as its descriptor gives them, for views of channels channels. Views may
// have been converted from the dataset's channel count (preprocess --channels): grey images
// made RGB repeat their one channel, so they repeat its statistics; RGB images made grey are
// their luma (ITU-R 601: 0.299 R + 0.587 G + 0.114 B), whose mean is that of the channel means
// and whose standard deviation is taken as that of the channel deviations (exact for perfectly
// correlated channels, an upper bound otherwise: natural images are close to it).
func Normalization(dataset string, channels int) (mean, std []float64, err error) {
	d, err := Lookup(dataset)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case channels == d.Channels:
		return slices.Clone(d.Mean), slices.Clone(d.Std), nil
	case d.Channels == 1 && channels == 3:
		return []float64{d.Mean[0], d.Mean[0], d.Mean[0]}, []float64{d.Std[0], d.Std[0], d.Std[0]}, nil
	case d.Channels == 3 && channels == 1:
		luma := [3]float64{0.299, 0.587, 0.114}
		var m, s float64
		for i, w := range luma {
			m += w * d.Mean[i]
			s += w * d.Std[i]
		}
		return []float64{m}, []float64{s}, nil
	}
	return nil, nil, fmt.Errorf("dataset %q: no normalisation for %d-channel views", dataset, channels)
}

// Standard normalisations, shared by the datasets that use them.
var (
	imagenetMean = []float64{0.485, 0.456, 0.406}
	imagenetStd  = []float64{0.229, 0.224, 0.225}
)

// fixedClasses adapts a class list that has no coarse variant to Descriptor.Classes.
func fixedClasses(names []string) func(bool) []string {
	return func(bool) []string { return slices.Clone(names) }
}

// Describe lists a fact of every dataset as "name value, …", for help texts.
func Describe(fact func(Descriptor) string) string {
	var parts []string
	for _, name := range Names() {
		if d, err := Lookup(name); err == nil {
			parts = append(parts, name+" "+fact(d))
		}
	}
	return strings.Join(parts, ", ")
}
