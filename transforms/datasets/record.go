package datasets

import (
	"context"
	"fmt"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// Record is one example read from a dataset.
type Record struct {
	// Key identifies the example, stable across runs, planning and unit sizes, and unique in
	// the dataset: "SPLIT/NNNNNN" (the position in the split's source files) for the
	// fixed-size formats, "SPLIT/RELATIVE/PATH" for image files (the same key whether read
	// from a folder or from the published tars). SPLIT is the split the record comes from,
	// so STL-10's train+unlabeled keeps the keys of train and unlabeled. Augmentations seed
	// their PRNG from it.
	Key string
	// Index is the position of the record in its split, in plan order, counting from 0.
	// Dense for every format but the tars, whose records have indices that increase in plan
	// order with gaps (each tar reserves Unit.Length/512+1 indices, a bound on its members,
	// since a tar's member count is unknown until it is read).
	Index int64
	// Label is the class, 0..len(Plan.Classes)-1, or -1 for unlabelled records.
	Label int
	// Source is the file the record came from (data file, image file or tar).
	Source string
	// Member is the tar member the record came from, "" for other sources. For a tar inside
	// another it is "INNER.tar/MEMBER".
	Member string
	// Offset is where the record starts in Source, in bytes: the record for the fixed-size
	// formats (in the uncompressed stream for gzipped IDX files), the member's data for tars,
	// 0 for image files.
	Offset int64
	// Ref is what the unit's kind needs, beyond the unit and Index, to fetch the record again
	// (Fetcher): an image file's path in its folder, a tar member's byte range and name;
	// "" where the index places the record (the fixed-size formats). Only the kind reads it.
	Ref string

	// Pixels is the decoded image of the fixed-size formats (CIFAR, STL-10, IDX). It is the
	// zero Image for encoded sources.
	Pixels transforms.Image
	// Encoded holds the file's bytes for JPEG and PNG sources, whose header Read has checked
	// against the unit's limits; decode them with Record.Image in the step that needs pixels.
	Encoded []byte
	// Format is FormatJPEG or FormatPNG for encoded records (from the magic bytes, not the
	// file name), "" otherwise.
	Format string
	// Width and Height are the image's size, from the header for encoded records.
	Width, Height int
}

// Image returns the record's pixels, decoding Encoded with Decode when the source was a JPEG
// or PNG. A corrupt image returns an error; pass it to Bad to make the dead letter.
func (r Record) Image(l Limits) (transforms.Image, error) {
	if r.Encoded == nil {
		if err := r.Pixels.Validate(); err != nil {
			return transforms.Image{}, fmt.Errorf("record %s: %w", r.Key, err)
		}
		return r.Pixels, nil
	}
	return Decode(r.Encoded, r.Format, l)
}

// Position says where the record is inside Source, for messages and dead letters.
func (r Record) Position() Position {
	return Position{Offset: r.Offset, Member: r.Member, File: r.Encoded != nil && r.Member == ""}
}

// Bad returns the dead letter for this record, for a failure found after Read emitted it
// (typically a JPEG that does not decode).
func (r Record) Bad(reason error) BadRecord {
	return BadRecord{Source: r.Source, Position: r.Position(), Key: r.Key, Reason: reason.Error()}
}

// Position is where a record lies in its source, as values: a reader states it, and
// messages and dead letters take what they need from it without parsing words back.
type Position struct {
	// Offset is the record's first byte in the source: the record of a fixed-size format
	// (in the uncompressed stream of a gzipped file), a tar member's data; 0 for a whole file.
	Offset int64
	// Member is the tar member holding the record, "INNER.tar/MEMBER" for a tar inside
	// another; "" for other sources.
	Member string
	// File is true when the record is the whole source file (an image file).
	File bool
}

// String says where in words: "byte N", "member NAME (data at byte N)", or "" for a whole file.
func (p Position) String() string {
	switch {
	case p.Member != "":
		return fmt.Sprintf("member %s (data at byte %d)", p.Member, p.Offset)
	case p.File:
		return ""
	default:
		return fmt.Sprintf("byte %d", p.Offset)
	}
}

// BadRecord is an input record that could not be used: the pipeline writes it to its
// dead-letter output. Every record a unit holds is either emitted or reported as a
// BadRecord, so records in = records out + bad records.
type BadRecord struct {
	Source   string   // the file (or tar) it was read from
	Position Position // where in Source
	Key      string   // the key the record would have had, "" when unknown
	Reason   string   // what is wrong, in words
}

func (b BadRecord) String() string {
	where := b.Source
	if p := b.Position.String(); p != "" {
		where += ", " + p
	}
	return fmt.Sprintf("%s (%s): %s", b.Key, where, b.Reason)
}

// Stats counts what one Read saw.
type Stats struct {
	Records int64 // records emitted
	Bad     int64 // bad records reported
	// Ignored counts tar members that are not images (names other than .jpg, .jpeg, .png);
	// they are not records. Folders report theirs in Plan.Ignored.
	Ignored int64
}

// Read streams the records of one unit, in order, to emit, and reports records it cannot use
// to bad. It returns an error, and stops, when the unit cannot be read at all (a missing or
// changed file, a truncated fixed-size file, a tar member whose path escapes the archive) or
// when emit or bad return one. For units with an exact count, Read checks that emitted plus
// bad records equal Unit.Records.
//
// Both callbacks are required. Records are independent: emit may keep them (Pixels and
// Encoded are never reused). A unit of a gzipped IDX file decompresses the file from its
// start, skipping the records before its range.
func Read(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (Stats, error) {
	var st Stats
	counted := func(r Record) error { st.Records++; return emit(r) }
	reported := func(b BadRecord) error { st.Bad++; return bad(b) }
	k, ok := kindOf(u.Kind)
	if !ok {
		return st, fmt.Errorf("unit of unknown kind %q", u.Kind)
	}
	var err error
	st.Ignored, err = k.Read(ctx, u, counted, reported)
	if err != nil {
		return st, err
	}
	if u.Exact && st.Records+st.Bad != u.Records {
		return st, fmt.Errorf("%s: read %d records and %d bad records, the unit holds %d", u, st.Records, st.Bad, u.Records)
	}
	return st, nil
}
