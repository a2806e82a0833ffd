package datasets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Ref finds a record again: the unit it was read from (an index into the Fetcher's units),
// its Record.Index, and the reference its reader gave it (Record.Ref).
type Ref struct {
	Unit  int
	Index int64
	Ref   string
}

// RefOf is the reference of a record read from units[unit].
func RefOf(unit int, r *Record) Ref { return Ref{Unit: unit, Index: r.Index, Ref: r.Ref} }

// Fetcher fetches records again by reference, for a pipeline that carried references rather
// than records to where it writes them. It holds the files its kinds keep open for ranged
// reads (tars) until Close. It is safe for concurrent use.
type Fetcher struct {
	units []Unit

	mu    sync.Mutex
	files map[string]storage.File
}

// NewFetcher returns a Fetcher of records of units (the plan's units, or ForFetch of them:
// Ref.Unit indexes them).
func NewFetcher(units []Unit) *Fetcher { return &Fetcher{units: units} }

// ForFetch is what a Fetcher needs of a unit: the unit without its file lists (Files and
// Labels, long for a flat ImageNet val folder), which the references replace, so that
// the units a pipeline ships to its workers stay small.
func (u Unit) ForFetch() Unit {
	u.Files, u.Labels = nil, nil
	return u
}

// Unit returns the unit a reference names.
func (f *Fetcher) Unit(r Ref) *Unit { return &f.units[r.Unit] }

// Fetch reads again the records refs name and passes each to got with its place in refs,
// from the calling goroutine, in any order, at most once per reference. A record that can
// no longer be read as it was is left out: the caller, which knows what it expects, reports
// it. An error means the input could not be read (or got failed).
func (f *Fetcher) Fetch(ctx context.Context, refs []Ref, got func(i int, r Record) error) error {
	for _, r := range refs {
		if r.Unit < 0 || r.Unit >= len(f.units) {
			return fmt.Errorf("a reference to unit %d of %d", r.Unit, len(f.units))
		}
	}
	if len(refs) == 0 {
		return nil
	}
	kind := f.units[refs[0].Unit].Kind
	if !slices.ContainsFunc(refs, func(r Ref) bool { return f.units[r.Unit].Kind != kind }) {
		return f.fetchKind(ctx, kind, refs, got)
	}
	byKind := map[string][]int{}
	var kinds []string
	for i, r := range refs {
		k := f.units[r.Unit].Kind
		if byKind[k] == nil {
			kinds = append(kinds, k)
		}
		byKind[k] = append(byKind[k], i)
	}
	for _, k := range kinds {
		idx := byKind[k]
		sub := make([]Ref, len(idx))
		for j, i := range idx {
			sub[j] = refs[i]
		}
		if err := f.fetchKind(ctx, k, sub, func(j int, r Record) error { return got(idx[j], r) }); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fetcher) fetchKind(ctx context.Context, kind string, refs []Ref, got func(int, Record) error) error {
	k, ok := kindOf(kind)
	if !ok {
		return fmt.Errorf("unit of unknown kind %q", kind)
	}
	return k.Fetch(ctx, f, refs, got)
}

// Open returns p opened for ranged reads, kept open (and shared) until Close.
func (f *Fetcher) Open(ctx context.Context, p string) (storage.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if file, ok := f.files[p]; ok {
		return file, nil
	}
	file, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	if f.files == nil {
		f.files = map[string]storage.File{}
	}
	f.files[p] = file
	return file, nil
}

// OpenFiles is how many files Open keeps open.
func (f *Fetcher) OpenFiles() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.files)
}

// Close closes the files Open kept open; the Fetcher stays usable. No Fetch may be running.
func (f *Fetcher) Close() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for p, file := range f.files {
		if err := file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", p, err))
		}
	}
	f.files = nil
	return errors.Join(errs...)
}

// coalesceBytes is the largest gap between two wanted records of a file that fetchInRanges
// reads through rather than starting a new range (a range costs an open and a 1 MiB buffer).
const coalesceBytes = 256 << 10

// fetchInRanges fetches records of units whose records lie side by side in one file, each
// Unit.RecordBytes long and placed by its index: the wanted positions of each file, sorted,
// are read in ranges (gaps of up to coalesceBytes read through; a whole file's worth when
// oneRange says the file must be read from its start anyway) by read on a copy of the unit
// that covers just the range.
func fetchInRanges(ctx context.Context, f *Fetcher, refs []Ref, got func(int, Record) error,
	read UnitReader, oneRange func(path string) bool) error {
	type file struct {
		tmpl Unit    // a unit of the file: Index and KeyBase are First plus a constant
		pos  []int64 // positions of the wanted records in the file
	}
	files := map[string]*file{}
	var paths []string
	want := make(map[int64][]int, len(refs)) // record index -> places in refs
	for i, r := range refs {
		u := f.Unit(r)
		fl := files[u.Path]
		if fl == nil {
			fl = &file{tmpl: *u}
			files[u.Path] = fl
			paths = append(paths, u.Path)
		}
		fl.pos = append(fl.pos, u.First+(r.Index-u.Index))
		want[r.Index] = append(want[r.Index], i)
	}
	for _, p := range paths {
		fl := files[p]
		slices.Sort(fl.pos)
		fl.pos = slices.Compact(fl.pos)
		gap := max(1, coalesceBytes/max(1, fl.tmpl.RecordBytes))
		if oneRange != nil && oneRange(p) {
			gap = 1 << 62
		}
		for i := 0; i < len(fl.pos); {
			j := i
			for j+1 < len(fl.pos) && fl.pos[j+1]-fl.pos[j] <= gap {
				j++
			}
			lo, hi := fl.pos[i], fl.pos[j]
			ru := fl.tmpl
			ru.First, ru.Records, ru.Exact = lo, hi-lo+1, true
			ru.Index = fl.tmpl.Index + (lo - fl.tmpl.First)
			ru.KeyBase = fl.tmpl.KeyBase + (lo - fl.tmpl.First)
			_, err := read(ctx, ru, func(rec Record) error {
				for _, at := range want[rec.Index] {
					if err := got(at, rec); err != nil {
						return err
					}
				}
				return nil
			}, func(BadRecord) error { return nil }) // a wanted record gone bad is left out
			if err != nil {
				return fmt.Errorf("re-reading %s: %w", ru, err)
			}
			i = j + 1
		}
	}
	return nil
}
