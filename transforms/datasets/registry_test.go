package datasets

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRegistryHoldsEveryDataset(t *testing.T) {
	want := []string{CIFAR10, CIFAR100, FashionMNIST, Folder, IDX, ImageNet, ImageNet100, MNIST, STL10}
	// Tests register toy datasets (named toy-…) too.
	got := slices.DeleteFunc(Names(), func(n string) bool { return strings.HasPrefix(n, "toy-") })
	if !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, name := range want {
		d, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if d.Classes != nil && len(d.Classes(false)) == 0 {
			t.Errorf("%s: an empty fixed class list", name)
		}
	}
}

func TestRegistryFacts(t *testing.T) {
	tests := []struct {
		give               string
		wantSize, wantChan int
		wantMean0          float64
		wantAugment        string
		wantClasses        int // 0: from the input
	}{
		{CIFAR10, 32, 3, 0.4914, "simclr-cifar", 10},
		{CIFAR100, 32, 3, 0.5071, "simclr-cifar", 100},
		{STL10, 96, 3, 0.4467, "simclr-cifar", 10},
		{ImageNet, 224, 3, 0.485, "simclr-imagenet", 1000},
		{ImageNet100, 224, 3, 0.485, "simclr-imagenet", 100},
		{Folder, 224, 3, 0.485, "simclr-imagenet", 0},
		{IDX, 28, 1, 0.5, "simclr-cifar", 0},
		{MNIST, 28, 1, 0.1307, "simclr-cifar", 10},
		{FashionMNIST, 28, 1, 0.2860, "simclr-cifar", 10},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			d, err := Lookup(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if d.ViewSize != tt.wantSize || d.Channels != tt.wantChan || d.Augment != tt.wantAugment {
				t.Errorf("size %d, channels %d, augment %s; want %d, %d, %s", d.ViewSize, d.Channels, d.Augment, tt.wantSize, tt.wantChan, tt.wantAugment)
			}
			mean, std, err := Normalization(tt.give, tt.wantChan)
			if err != nil || mean[0] != tt.wantMean0 || len(std) != tt.wantChan {
				t.Errorf("Normalization = %v, %v, %v; want mean[0] %g", mean, std, err, tt.wantMean0)
			}
			classes, err := ClassNames(tt.give, false)
			if tt.wantClasses == 0 {
				if err == nil {
					t.Errorf("ClassNames = %d names for a dataset whose input decides them", len(classes))
				}
			} else if len(classes) != tt.wantClasses {
				t.Errorf("ClassNames = %d names (%v), want %d", len(classes), err, tt.wantClasses)
			}
		})
	}
	if coarse, _ := ClassNames(CIFAR100, true); len(coarse) != 20 {
		t.Errorf("CIFAR-100 coarse classes: %d, want 20", len(coarse))
	}
}

func TestUnknownDatasetIsAnError(t *testing.T) {
	for _, name := range []string{"cifar-10", "CIFAR10", "svhn", ""} {
		if _, err := Lookup(name); err == nil || !strings.Contains(err.Error(), "want one of") {
			t.Errorf("Lookup(%q) = %v, want an error listing the datasets", name, err)
		}
		if _, _, err := Normalization(name, 3); err == nil {
			t.Errorf("Normalization(%q): no error", name)
		}
		if _, err := MakePlan(context.Background(), Spec{Dataset: name, Input: t.TempDir()}); err == nil {
			t.Errorf("MakePlan(%q): no error", name)
		}
	}
	if _, _, err := Normalization(CIFAR10, 2); err == nil {
		t.Error("Normalization of CIFAR-10 for 2-channel views: no error")
	}
}

// TestNormalizationOfConvertedViews: views preprocessed to the other channel count
// (--channels) get statistics derived from the dataset's own.
func TestNormalizationOfConvertedViews(t *testing.T) {
	mean, std, err := Normalization(FashionMNIST, 3)
	if err != nil || !slices.Equal(mean, []float64{0.2860, 0.2860, 0.2860}) || !slices.Equal(std, []float64{0.3530, 0.3530, 0.3530}) {
		t.Errorf("Fashion-MNIST as RGB: %v, %v, %v", mean, std, err)
	}
	mean, std, err = Normalization(ImageNet, 1)
	wantMean := 0.299*0.485 + 0.587*0.456 + 0.114*0.406
	if err != nil || len(mean) != 1 || math.Abs(mean[0]-wantMean) > 1e-12 || !(std[0] > 0.224 && std[0] < 0.229) {
		t.Errorf("ImageNet as grey: %v, %v, %v (want mean %g, std between the channels')", mean, std, err, wantMean)
	}
}

func TestRegisterRefusesBadDescriptors(t *testing.T) {
	good := Descriptor{Name: "toy-refused", Input: "a folder", ViewSize: 8, Channels: 1, Mean: []float64{0.5}, Std: []float64{0.25},
		Augment: "simclr-cifar", Plan: func(context.Context, Spec) (Plan, error) { return Plan{}, nil }}
	tests := []struct {
		name   string
		modify func(*Descriptor)
	}{
		{"taken name", func(d *Descriptor) { d.Name = CIFAR10 }},
		{"upper-case name", func(d *Descriptor) { d.Name = "Toy" }},
		{"no plan", func(d *Descriptor) { d.Plan = nil }},
		{"no input", func(d *Descriptor) { d.Input = "" }},
		{"two channels", func(d *Descriptor) { d.Channels = 2 }},
		{"missing std", func(d *Descriptor) { d.Std = nil }},
		{"zero std", func(d *Descriptor) { d.Std = []float64{0} }},
		{"no preset", func(d *Descriptor) { d.Augment = "" }},
		{"count of an unknown split", func(d *Descriptor) {
			d.Splits, d.Published = []string{"train"}, map[string]int64{"val": 1}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := good
			tt.modify(&d)
			defer func() {
				if recover() == nil {
					t.Fatal("Register accepted it")
				}
			}()
			Register(d)
		})
	}
}

// TestToyDatasetIsOneRegistration adds a dataset the way the package doc says (one Register
// call with a Plan function) and plans it: the split check and the published-count warning
// come from its descriptor.
func TestToyDatasetIsOneRegistration(t *testing.T) {
	if _, err := Lookup("toy-squares"); err == nil {
		t.Skip("registered by an earlier run of this test (-count)")
	}
	Register(Descriptor{
		Name: "toy-squares", Summary: "test squares", Input: "any folder", Splits: []string{"train"},
		Classes: fixedClasses([]string{"small", "large"}), Published: map[string]int64{"train": 5},
		ViewSize: 8, Channels: 1, Mean: []float64{0.5}, Std: []float64{0.25}, Augment: "simclr-cifar",
		Plan: func(_ context.Context, s Spec) (Plan, error) {
			return Plan{Classes: []string{"small", "large"}, Units: []Unit{{Kind: KindIDX, Split: s.Split, Path: s.Input, Records: 4, Exact: true}}}, nil
		},
	})
	p, err := MakePlan(context.Background(), Spec{Dataset: "toy-squares", Input: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if p.Records != 4 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "published dataset has 5") {
		t.Errorf("plan: %d records, warnings %q", p.Records, p.Warnings)
	}
	if _, err := MakePlan(context.Background(), Spec{Dataset: "toy-squares", Input: t.TempDir(), Split: "test"}); err == nil {
		t.Error("a split the descriptor does not list was accepted")
	}
	if !slices.Contains(Names(), "toy-squares") {
		t.Error("Names() misses the new dataset")
	}
}

// TestToyKindIsReadThroughItsRegistration: a dataset with a unit format of its own registers
// its reader, and Read streams its units with the usual count check.
func TestToyKindIsReadThroughItsRegistration(t *testing.T) {
	const kind = "toy-kind"
	if _, ok := kindOf(kind); !ok {
		RegisterKind(kind, Kind{
			Read: func(_ context.Context, u Unit, emit func(Record) error, _ func(BadRecord) error) (int64, error) {
				for i := range u.Records {
					if err := emit(Record{Index: u.Index + i, Ref: strconv.FormatInt(i, 10)}); err != nil {
						return 0, err
					}
				}
				return 0, nil
			},
			Fetch: func(_ context.Context, f *Fetcher, refs []Ref, got func(int, Record) error) error {
				for i, r := range refs {
					if err := got(i, Record{Index: r.Index, Ref: r.Ref, Label: int(f.Unit(r).Records)}); err != nil {
						return err
					}
				}
				return nil
			},
		})
	}
	st, err := Read(context.Background(), Unit{Kind: kind, Records: 3, Exact: true}, func(Record) error { return nil }, func(BadRecord) error { return nil })
	if err != nil || st.Records != 3 {
		t.Fatalf("Read = %+v, %v", st, err)
	}
	if _, err := Read(context.Background(), Unit{Kind: "no-such-kind"}, nil, nil); err == nil {
		t.Error("a unit of an unregistered kind was read")
	}
	f := NewFetcher([]Unit{{Kind: kind, Records: 3}})
	var got []Record
	if err := f.Fetch(context.Background(), []Ref{{Unit: 0, Index: 2, Ref: "2"}}, func(_ int, r Record) error { got = append(got, r); return nil }); err != nil ||
		len(got) != 1 || got[0].Index != 2 || got[0].Ref != "2" || got[0].Label != 3 {
		t.Errorf("Fetch = %+v, %v", got, err)
	}
	if err := f.Fetch(context.Background(), []Ref{{Unit: 1}}, func(int, Record) error { return nil }); err == nil {
		t.Error("a reference to a unit the fetcher does not hold was fetched")
	}
	for _, k := range []Kind{{}, {Read: func(context.Context, Unit, func(Record) error, func(BadRecord) error) (int64, error) { return 0, nil }}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterKind accepted an incomplete kind %+v", k)
				}
			}()
			RegisterKind("toy-incomplete", k)
		}()
	}
}

// TestResolvedSpecIsLookedUpOnce: a spec that Resolve has given its descriptor plans with
// that descriptor (its planner), not another lookup: a preprocess path looks its dataset up
// once; a spec whose dataset is changed after is looked up again.
func TestResolvedSpecIsLookedUpOnce(t *testing.T) {
	spec, d, err := Spec{Dataset: IDX, Input: t.TempDir()}.Resolve()
	if err != nil || d.Name != IDX {
		t.Fatalf("Resolve = %+v, %v", d, err)
	}
	calls := 0
	d.Plan = func(_ context.Context, s Spec) (Plan, error) {
		calls++
		return Plan{Classes: []string{"a"}, Units: []Unit{{Kind: KindIDX, Split: s.Split, Path: s.Input, Records: 4, Exact: true}}}, nil
	}
	spec.desc = &d
	if p, err := MakePlan(context.Background(), spec); err != nil || calls != 1 || p.Records != 4 {
		t.Errorf("MakePlan of a resolved spec: %d records, %v; its descriptor's planner ran %d times, want once", p.Records, err, calls)
	}
	spec.Dataset = CIFAR10
	if again, d, err := spec.Resolve(); err != nil || d.Name != CIFAR10 || again.desc.Name != CIFAR10 {
		t.Errorf("Resolve after the dataset changed = %s, %v", d.Name, err)
	}
}
