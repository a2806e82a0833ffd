package datasets

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/transforms"
)

func init() {
	RegisterKind(KindIDX, Kind{Read: readIDXUnit, Fetch: func(ctx context.Context, f *Fetcher, refs []Ref, got func(int, Record) error) error {
		// A gzipped file is decompressed from its start for every range: one range.
		return fetchInRanges(ctx, f, refs, got, readIDXUnit, func(p string) bool { return strings.HasSuffix(p, ".gz") })
	}})
	idxSplits := []string{"train", "test"}
	const idxInput = "the folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"
	Register(Descriptor{
		Name: IDX, Summary: "MNIST-style IDX files with numeric class names (0 to the largest label)",
		Input:  idxInput,
		Splits: idxSplits, ViewSize: 28, Channels: 1,
		// Unknown grey images: mid-grey with a typical spread.
		Mean: []float64{0.5}, Std: []float64{0.25},
		Augment: "simclr-cifar", Plan: planIDX,
	})
	Register(Descriptor{
		Name: MNIST, Summary: "MNIST's IDX files",
		Input:  idxInput,
		Splits: idxSplits, Classes: func(bool) []string { return numberedClasses(10) },
		Published: map[string]int64{"train": 60000, "test": 10000},
		ViewSize:  28, Channels: 1, Mean: []float64{0.1307}, Std: []float64{0.3081},
		Augment: "simclr-cifar", Plan: planIDX,
	})
	Register(Descriptor{
		Name: FashionMNIST, Summary: "Fashion-MNIST's IDX files",
		Input:  idxInput,
		Splits: idxSplits, Classes: fixedClasses(fashionMNISTClasses),
		Published: map[string]int64{"train": 60000, "test": 10000},
		ViewSize:  28, Channels: 1, Mean: []float64{0.2860}, Std: []float64{0.3530},
		Augment: "simclr-cifar", Plan: planIDX,
	})
}

// IDX files (http://yann.lecun.com/exdb/mnist/): a 4-byte magic number (two zero bytes, the
// element type, the number of dimensions), one big-endian uint32 per dimension, then the
// elements. MNIST and Fashion-MNIST images are unsigned bytes in 3 dimensions (count, rows,
// columns), labels unsigned bytes in 1.
const (
	idxUnsignedByte = 0x08
	gzipMagic0      = 0x1f
	gzipMagic1      = 0x8b
)

// idxHeader is what an IDX header says.
type idxHeader struct {
	Count      int64
	Rows, Cols int // 1 for label files
	Len        int64
}

func (h idxHeader) recordBytes() int64 { return int64(h.Rows) * int64(h.Cols) }

// dataBytes is the size of the whole uncompressed file the header promises.
func (h idxHeader) dataBytes() int64 { return h.Len + h.Count*h.recordBytes() }

// parseIDXHeader parses the header at the start of b, which must hold at least its 16
// (images, dims 3) or 8 (labels, dims 1) bytes.
func parseIDXHeader(b []byte, dims int) (idxHeader, error) {
	want := [4]byte{0, 0, idxUnsignedByte, byte(dims)}
	hlen := 4 + 4*dims
	if len(b) < 4 {
		return idxHeader{}, fmt.Errorf("IDX header needs %d bytes, the file has %d", hlen, len(b))
	}
	if b[0] != 0 || b[1] != 0 || b[3] != byte(dims) {
		return idxHeader{}, fmt.Errorf("wrong magic number % x: want % x (unsigned bytes in %d dimensions)", b[:4], want[:], dims)
	}
	if b[2] != idxUnsignedByte {
		return idxHeader{}, fmt.Errorf("IDX element type 0x%02x: only unsigned bytes (0x08) are supported", b[2])
	}
	if len(b) < hlen {
		return idxHeader{}, fmt.Errorf("IDX header needs %d bytes, the file has %d", hlen, len(b))
	}
	h := idxHeader{Count: int64(binary.BigEndian.Uint32(b[4:])), Rows: 1, Cols: 1, Len: int64(hlen)}
	if dims == 3 {
		rows, cols := binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
		if rows == 0 || cols == 0 || int64(rows)*int64(cols) > DefaultMaxPixels {
			return idxHeader{}, fmt.Errorf("IDX images of %dx%d pixels: want 1 to %d pixels", rows, cols, DefaultMaxPixels)
		}
		h.Rows, h.Cols = int(rows), int(cols)
	}
	return h, nil
}

// idxStream is an IDX file opened for reading from its first element, decompressed.
type idxStream struct {
	io.Reader
	header idxHeader
	gz     bool
	close  func() error
}

func (s *idxStream) Close() error { return s.close() }

// openIDX opens an IDX file, gzipped or not (told by its magic bytes), checks its header,
// and positions the stream at record first, to read count records (-1: all the rest). Plain files are read from that byte on; gzipped
// ones are decompressed from the start and the records before first are skipped.
func openIDX(ctx context.Context, p string, dims int, first, count int64) (*idxStream, error) {
	f, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	var magic [2]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: reading the IDX header: %w", p, err)
	}
	if magic[0] != gzipMagic0 || magic[1] != gzipMagic1 {
		var hb [16]byte
		n, err := f.ReadAt(hb[:4+4*dims], 0)
		if err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return nil, fmt.Errorf("%s: reading the IDX header: %w", p, err)
		}
		h, err := parseIDXHeader(hb[:n], dims)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if count < 0 {
			count = h.Count - first
		}
		if err := checkRange(p, h, first, count); err != nil {
			f.Close()
			return nil, err
		}
		if f.Size() != h.dataBytes() {
			f.Close()
			return nil, sizeMismatch(p, h, f.Size())
		}
		off, n64 := h.Len+first*h.recordBytes(), count*h.recordBytes()
		r := bufio.NewReaderSize(io.NewSectionReader(f, off, n64), readBuffer)
		return &idxStream{Reader: r, header: h, close: f.Close}, nil
	}
	f.Close()
	raw, err := storage.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(raw, readBuffer))
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s := &idxStream{Reader: bufio.NewReaderSize(zr, readBuffer), gz: true, close: func() error { return errors.Join(zr.Close(), raw.Close()) }}
	hb := make([]byte, 4+4*dims)
	n, err := io.ReadFull(s, hb)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		s.Close()
		return nil, fmt.Errorf("%s: reading the IDX header: %w", p, err)
	}
	if s.header, err = parseIDXHeader(hb[:n], dims); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s (gzip): %w", p, err)
	}
	if count < 0 {
		count = s.header.Count - first
	}
	if err := checkRange(p, s.header, first, count); err != nil {
		s.Close()
		return nil, err
	}
	if skip := first * s.header.recordBytes(); skip > 0 {
		if _, err := io.CopyN(io.Discard, s, skip); err != nil {
			s.Close()
			return nil, fmt.Errorf("%s: skipping to record %d: %w", p, first, err)
		}
	}
	return s, nil
}

func checkRange(p string, h idxHeader, first, count int64) error {
	if first < 0 || count < 0 || first+count > h.Count {
		return fmt.Errorf("%s: holds %d records, the unit reads %d to %d: changed since planning", p, h.Count, first, first+count-1)
	}
	return nil
}

func sizeMismatch(p string, h idxHeader, got int64) error {
	what := "truncated"
	if got > h.dataBytes() {
		what = "longer than its header says"
	}
	return fmt.Errorf("%s: %s: %d bytes, but its header promises %d records of %d bytes after %d header bytes (%d bytes)",
		p, what, got, h.Count, h.recordBytes(), h.Len, h.dataBytes())
}

// checkIDXRest reads what is left of s (read bytes of it already consumed after the
// header) and checks that the file is as long as its header says. A gzipped stream is read
// to its very end, so that gzip's CRC-32 there vouches for every record before any is
// trusted: a unit that reads only the first records (--limit) never reaches it, and deflate
// turns a damaged byte into garbage pixels without an error of its own. (A concatenated gzip
// file's members are each checked.) Plain files were measured by openIDX.
func checkIDXRest(ctx context.Context, p string, s *idxStream, read int64) error {
	if !s.gz {
		return nil
	}
	n, err := io.Copy(io.Discard, ctxReader{ctx, s}) // a whole file: stop when the run is stopped
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	got := s.header.Len + read + n
	switch {
	case errors.Is(err, gzip.ErrChecksum):
		return fmt.Errorf("%s: corrupt gzip stream: its CRC-32 does not match the data (the whole stream is checked before any record is used, with --limit too)", p)
	case err != nil:
		return fmt.Errorf("%s: corrupt gzip stream after %d decompressed bytes: %w (the whole stream is checked before any record is used, with --limit too)", p, got, err)
	case got != s.header.dataBytes():
		return sizeMismatch(p+" (decompressed)", s.header, got)
	}
	return nil
}

// idxNames returns the candidate file names of an IDX split, best first: plain files before
// gzipped ones (a plain file can be read from any record on), "-idx" before ".idx" (a
// variant some mirrors use).
func idxNames(split, kind string) []string {
	prefix, dims := "train", "idx3"
	if split == "test" {
		prefix = "t10k"
	}
	if kind == "labels" {
		dims = "idx1"
	}
	base := prefix + "-" + kind
	return []string{base + "-" + dims + "-ubyte", base + "-" + dims + "-ubyte.gz", base + "." + dims + "-ubyte", base + "." + dims + "-ubyte.gz"}
}

func findIDX(ctx context.Context, dir, split, kind string) (string, error) {
	names := idxNames(split, kind)
	for _, n := range names {
		p := storage.Join(dir, n)
		ok, err := storage.Exists(ctx, p)
		if err != nil {
			return "", err
		}
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("IDX %s: %s has no %s file (looked for %s or %s)", split, dir, kind, names[0], names[1])
}

func planIDX(ctx context.Context, s Spec) (Plan, error) {
	images, err := findIDX(ctx, s.Input, s.Split, "images")
	if err != nil {
		return Plan{}, err
	}
	labels, err := findIDX(ctx, s.Input, s.Split, "labels")
	if err != nil {
		return Plan{}, err
	}
	is, err := openIDX(ctx, images, 3, 0, -1)
	if err != nil {
		return Plan{}, err
	}
	defer is.Close()
	if err := checkIDXRest(ctx, images, is, 0); err != nil {
		return Plan{}, err
	}
	ls, err := openIDX(ctx, labels, 1, 0, -1)
	if err != nil {
		return Plan{}, err
	}
	defer ls.Close()
	if ls.header.Count != is.header.Count {
		return Plan{}, fmt.Errorf("IDX %s: %s holds %d images but %s holds %d labels", s.Split, images, is.header.Count, labels, ls.header.Count)
	}
	// A named dataset's file with its header rewritten to what it holds is read as any other
	// copy of a published file: a little short of the published count is a cut copy.
	if s.Dataset != IDX {
		want, err := publishedPerFile(s, 1)
		if err != nil {
			return Plan{}, err
		}
		if err := checkPublishedFile(s.Dataset+" "+s.Split, images, is.header.Count, want); err != nil {
			return Plan{}, err
		}
	}
	var classes []string
	if s.Dataset == IDX {
		// Any byte is a label: the classes are 0..the largest label seen (a pass over a
		// file of one byte a record).
		maxLabel := -1
		br := bufio.NewReaderSize(io.LimitReader(ctxReader{ctx, ls}, ls.header.Count), readBuffer)
		for i := int64(0); i < ls.header.Count; i++ {
			b, err := br.ReadByte()
			if err != nil && ctx.Err() != nil {
				return Plan{}, ctx.Err()
			}
			if err != nil {
				return Plan{}, fmt.Errorf("%s: reading label %d of %d: %w", labels, i, ls.header.Count, err)
			}
			maxLabel = max(maxLabel, int(b))
		}
		if err := checkIDXRest(ctx, labels, ls, ls.header.Count); err != nil {
			return Plan{}, err
		}
		classes = numberedClasses(maxLabel + 1)
	} else {
		if err := checkIDXRest(ctx, labels, ls, 0); err != nil {
			return Plan{}, err
		}
		if classes, err = ClassNames(s.Dataset, false); err != nil {
			return Plan{}, err
		}
	}
	p := Plan{Classes: classes}
	chunks(is.header.Count, int64(s.UnitRecords), func(first, count int64) {
		p.Units = append(p.Units, Unit{
			Kind: KindIDX, Split: s.Split, Path: images, LabelsPath: labels, First: first, Records: count,
			Exact: true, RecordBytes: is.header.recordBytes(), Index: first, KeyBase: first, NumClasses: len(classes),
		})
	})
	return p, nil
}

// parseIDXRecord makes the image of one IDX record and checks its label.
func parseIDXRecord(pix []byte, rows, cols int, label byte, numClasses int) (transforms.Image, error) {
	if len(pix) != rows*cols {
		return transforms.Image{}, fmt.Errorf("IDX record has %d bytes, want %dx%d", len(pix), rows, cols)
	}
	if int(label) >= numClasses {
		return transforms.Image{}, fmt.Errorf("label %d outside 0..%d", label, numClasses-1)
	}
	m := transforms.Image{Pix: make([]uint8, len(pix)), H: rows, W: cols, C: 1}
	copy(m.Pix, pix)
	return m, nil
}

func readIDXUnit(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (int64, error) {
	return 0, readIDX(ctx, u, emit, bad)
}

func readIDX(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) error {
	is, err := openIDX(ctx, u.Path, 3, u.First, u.Records)
	if err != nil {
		return err
	}
	defer is.Close()
	ls, err := openIDX(ctx, u.LabelsPath, 1, u.First, u.Records)
	if err != nil {
		return err
	}
	defer ls.Close()
	if is.header.Count != ls.header.Count {
		return fmt.Errorf("%s holds %d images but %s holds %d labels", u.Path, is.header.Count, u.LabelsPath, ls.header.Count)
	}
	h := is.header
	buf := make([]byte, h.recordBytes())
	var y [1]byte
	for i := range u.Records {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		n := u.First + i
		offset := h.Len + n*h.recordBytes()
		if _, err := io.ReadFull(is, buf); err != nil {
			return fmt.Errorf("%s: reading image %d at byte %d: %w", u.Path, n, offset, err)
		}
		if _, err := io.ReadFull(ls, y[:]); err != nil {
			return fmt.Errorf("%s: reading label %d: %w", u.LabelsPath, n, err)
		}
		key := fmt.Sprintf("%s/%06d", u.Split, u.KeyBase+i)
		img, err := parseIDXRecord(buf, h.Rows, h.Cols, y[0], u.NumClasses)
		if err != nil {
			b := BadRecord{Source: u.LabelsPath, Position: Position{Offset: ls.header.Len + n}, Key: key, Reason: err.Error()}
			if err := bad(b); err != nil {
				return err
			}
			continue
		}
		rec := Record{Key: key, Index: u.Index + i, Label: int(y[0]), Source: u.Path, Offset: offset,
			Pixels: img, Width: img.W, Height: img.H}
		if err := emit(rec); err != nil {
			return err
		}
	}
	return nil
}
