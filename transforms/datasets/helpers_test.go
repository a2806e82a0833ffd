package datasets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// Fixture writers: tiny datasets in the published formats, made in the test.

// cifarPixel is the value a fixture gives channel c of pixel (y, x) of record i: distinct
// enough that a mixed-up layout shows.
func cifarPixel(i, c, y, x int) byte { return byte(i*7 + c*64 + y*3 + x) }

// cifarBytes makes n CIFAR records; labels[i] (and coarse[i] for CIFAR-100 when coarse is
// not nil) are their label bytes.
func cifarBytes(first int, labels []byte, coarse []byte) []byte {
	var b bytes.Buffer
	for i, l := range labels {
		if coarse != nil {
			b.WriteByte(coarse[i])
		}
		b.WriteByte(l)
		for c := range 3 {
			for y := range 32 {
				for x := range 32 {
					b.WriteByte(cifarPixel(first+i, c, y, x))
				}
			}
		}
	}
	return b.Bytes()
}

func repeatLabels(n, classes int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i % classes)
	}
	return out
}

// writeCIFAR10 writes the 6 files of a CIFAR-10 folder with per records per file.
func writeCIFAR10(t testing.TB, dir string, per int) {
	t.Helper()
	for i := 1; i <= 5; i++ {
		testfiles.WriteFile(t, filepath.Join(dir, fmt.Sprintf("data_batch_%d.bin", i)), cifarBytes((i-1)*per, repeatLabels(per, 10), nil))
	}
	testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, repeatLabels(per, 10), nil))
}

// stlPixel is the value of channel c at row y, column x of STL image i.
func stlPixel(i, c, y, x int) byte { return byte(i*11 + c*50 + y*5 + x*3) }

// stlBytes makes n STL-10 images, each plane stored column by column.
func stlBytes(first, n int) []byte {
	b := make([]byte, 0, n*stl10Record)
	for i := range n {
		for c := range 3 {
			for x := range 96 {
				for y := range 96 {
					b = append(b, stlPixel(first+i, c, y, x))
				}
			}
		}
	}
	return b
}

func writeSTL10(t testing.TB, dir string, train, test, unlabeled int) {
	t.Helper()
	y := func(n int) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(i%10 + 1)
		}
		return out
	}
	testfiles.WriteFile(t, filepath.Join(dir, "train_X.bin"), stlBytes(0, train))
	testfiles.WriteFile(t, filepath.Join(dir, "train_y.bin"), y(train))
	testfiles.WriteFile(t, filepath.Join(dir, "test_X.bin"), stlBytes(0, test))
	testfiles.WriteFile(t, filepath.Join(dir, "test_y.bin"), y(test))
	testfiles.WriteFile(t, filepath.Join(dir, "unlabeled_X.bin"), stlBytes(0, unlabeled))
}

// idxImages makes an IDX image file of n rows×cols images.
func idxImages(n, rows, cols int) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0, 0, 8, 3}, uint32(n))
	b = binary.BigEndian.AppendUint32(b, uint32(rows))
	b = binary.BigEndian.AppendUint32(b, uint32(cols))
	for i := range n * rows * cols {
		b = append(b, byte(i*13))
	}
	return b
}

func idxLabels(labels []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0, 0, 8, 1}, uint32(len(labels))), labels...)
}

// writeIDX writes a train and test IDX pair, gzipped when zipped.
func writeIDX(t testing.TB, dir string, train, test int, zipped bool) {
	t.Helper()
	for _, s := range []struct {
		prefix string
		n      int
	}{{"train", train}, {"t10k", test}} {
		images, labels := idxImages(s.n, 28, 28), idxLabels(repeatLabels(s.n, 10))
		suffix := ""
		if zipped {
			images, labels, suffix = testfiles.Gzip(t, images), testfiles.Gzip(t, labels), ".gz"
		}
		testfiles.WriteFile(t, filepath.Join(dir, s.prefix+"-images-idx3-ubyte"+suffix), images)
		testfiles.WriteFile(t, filepath.Join(dir, s.prefix+"-labels-idx1-ubyte"+suffix), labels)
	}
}

// result is everything a plan's units gave.
type result struct {
	recs    []Record
	bads    []BadRecord
	ignored int64
}

func readPlan(t testing.TB, p Plan) result {
	t.Helper()
	var r result
	for _, u := range p.Units {
		st, err := Read(context.Background(), u,
			func(rec Record) error { r.recs = append(r.recs, rec); return nil },
			func(b BadRecord) error { r.bads = append(r.bads, b); return nil })
		if err != nil {
			t.Fatalf("Read(%s): %v", u, err)
		}
		r.ignored += st.Ignored
	}
	if p.Exact && int64(len(r.recs)+len(r.bads)) != p.Records {
		t.Fatalf("read %d records and %d bad records, the plan holds %d", len(r.recs), len(r.bads), p.Records)
	}
	return r
}

func mustPlan(t testing.TB, s Spec) Plan {
	t.Helper()
	p, err := MakePlan(context.Background(), s)
	if err != nil {
		t.Fatalf("MakePlan(%+v): %v", s, err)
	}
	return p
}

// planErr returns MakePlan's error, failing the test when there is none.
func planErr(t testing.TB, s Spec) error {
	t.Helper()
	p, err := MakePlan(context.Background(), s)
	if err == nil {
		t.Fatalf("MakePlan(%+v) = %d units, want an error", s, len(p.Units))
	}
	return err
}

// wantErrorMentions fails unless err mentions every piece.
func wantErrorMentions(t testing.TB, err error, pieces ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", pieces)
	}
	for _, p := range pieces {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// fingerprint describes a record fully, pixels and bytes by hash.
func fingerprint(r Record) string {
	return fmt.Sprintf("%s|%d|%d|%s|%s|%d|%s|%dx%d|%x|%x", r.Key, r.Index, r.Label, r.Source, r.Member, r.Offset,
		r.Format, r.Width, r.Height, sha256.Sum256(r.Pixels.Pix), sha256.Sum256(r.Encoded))
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
