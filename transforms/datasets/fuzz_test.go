package datasets

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

func FuzzIDXHeader(f *testing.F) {
	f.Add(idxImages(2, 28, 28)[:16])
	f.Add(idxLabels([]byte{1, 2})[:8])
	f.Add([]byte{0, 0, 8, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{0, 0, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, dims := range []int{1, 3} {
			h, err := parseIDXHeader(b, dims)
			if err != nil {
				continue
			}
			if h.Count < 0 || h.Rows < 1 || h.Cols < 1 || h.Len != int64(4+4*dims) || h.recordBytes() > DefaultMaxPixels {
				t.Fatalf("header %+v from % x", h, b)
			}
		}
	})
}

// FuzzIDXFiles reads arbitrary image and label files end to end (through the in-memory
// filesystem): the reader may refuse them but must not panic, and what it reads must add up.
func FuzzIDXFiles(f *testing.F) {
	images, labels := idxImages(3, 2, 2), idxLabels([]byte{0, 1, 9})
	f.Add(images, labels, false)
	f.Add(images, labels, true)
	f.Add(images[:len(images)-1], labels, false)
	f.Add(images, idxLabels([]byte{0, 200, 9}), true)
	f.Fuzz(func(t *testing.T, images, labels []byte, zipped bool) {
		ctx := context.Background()
		dir := "memfs://fuzz-idx"
		suffix := ""
		if zipped {
			images, labels, suffix = testfiles.Gzip(t, images), testfiles.Gzip(t, labels), ".gz"
		}
		for _, n := range idxNames("train", "images") {
			storage.Remove(ctx, storage.Join(dir, n))
		}
		for _, n := range idxNames("train", "labels") {
			storage.Remove(ctx, storage.Join(dir, n))
		}
		if err := storage.WriteFile(ctx, storage.Join(dir, "train-images-idx3-ubyte"+suffix), images); err != nil {
			t.Fatal(err)
		}
		if err := storage.WriteFile(ctx, storage.Join(dir, "train-labels-idx1-ubyte"+suffix), labels); err != nil {
			t.Fatal(err)
		}
		p, err := MakePlan(ctx, Spec{Dataset: MNIST, Input: dir, UnitRecords: 2})
		if err != nil {
			return
		}
		var n int64
		for _, u := range p.Units {
			st, err := Read(ctx, u, func(r Record) error {
				if r.Label < 0 || r.Label > 9 || r.Pixels.Validate() != nil {
					t.Fatalf("record %+v", r)
				}
				return nil
			}, func(BadRecord) error { return nil })
			if err != nil {
				t.Fatalf("a planned unit failed: %v", err)
			}
			n += st.Records + st.Bad
		}
		if n != p.Records {
			t.Fatalf("read %d, planned %d", n, p.Records)
		}
	})
}

func FuzzFixedRecords(f *testing.F) {
	f.Add(cifarBytes(0, []byte{3}, nil), byte(1))
	f.Add(cifarBytes(0, []byte{99}, []byte{19}), byte(10))
	f.Add(stlBytes(0, 1), byte(0))
	f.Add([]byte{12}, byte(11))
	f.Fuzz(func(t *testing.T, rec []byte, y byte) {
		check := func(label int, m imageLike, err error, maxLabel int) {
			if err != nil {
				return
			}
			if label < -1 || label > maxLabel || m.Validate() != nil {
				t.Fatalf("label %d, image %v", label, m.Validate())
			}
		}
		l, m, err := parseCIFAR10(rec)
		check(l, m, err, 9)
		l, m, err = parseCIFAR100(rec, y%2 == 0)
		check(l, m, err, 99)
		l, m, err = parseSTL10(rec, y, y%3 != 0)
		check(l, m, err, 9)
		if len(rec) > 0 {
			m, err := parseIDXRecord(rec, 1, len(rec), y, 10)
			check(int(y), m, err, 9)
		}
	})
}

type imageLike interface{ Validate() error }

// FuzzTar streams arbitrary bytes as a per-class tar: errors are fine, panics are not, and
// every record must have a safe key, its bytes, and an index inside the tar's span.
func FuzzTar(f *testing.F) {
	jpg := testfiles.JPEG(f, 3, 3, 1)
	good := testfiles.Tar(f, []testfiles.TarMember{{Name: "a.JPEG", Data: jpg}, {Name: "b.txt", Data: []byte("x")}, {Name: "c.png", Data: testfiles.PNG(f, 2, 2, 1)}})
	f.Add(good)
	f.Add(good[:700])
	f.Add(testfiles.Tar(f, []testfiles.TarMember{{Name: "../x.JPEG", Data: jpg}}))
	f.Add(testfiles.Tar(f, []testfiles.TarMember{{Name: "d/", Type: '5'}, {Name: "d/e.jpg", Data: []byte("junk")}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		u := Unit{Kind: KindTar, Split: "train", Path: "fuzz.tar", Length: int64(len(data)), KeyDir: "n01440764",
			Index: 1000, MaxFileBytes: 1 << 20, Limits: Limits{MaxPixels: 1 << 20}}
		var n int64
		_, err := readTar(context.Background(), bytes.NewReader(data), u, func(r Record) error {
			n++
			if r.Encoded == nil || r.Width < 1 || r.Height < 1 || int64(r.Width)*int64(r.Height) > 1<<20 {
				t.Fatalf("record %s: %d bytes, %dx%d", r.Key, len(r.Encoded), r.Width, r.Height)
			}
			if !strings.HasPrefix(r.Key, "train/n01440764/") || strings.Contains(r.Key, "..") {
				t.Fatalf("unsafe key %q", r.Key)
			}
			if r.Index < u.Index || r.Index >= u.Index+tarIndexSpan(u.Length) {
				t.Fatalf("index %d outside %d+%d", r.Index, u.Index, tarIndexSpan(u.Length))
			}
			return nil
		}, func(BadRecord) error { n++; return nil })
		_ = err
		if n > tarIndexSpan(u.Length) {
			t.Fatalf("%d records from %d bytes", n, len(data))
		}
	})
}
