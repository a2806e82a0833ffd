package jpeg

import (
	"bytes"
	"errors"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// firstScan returns a JPEG's bytes up to its first scan, the first scan (its SOS segment and
// entropy-coded data) and what follows it.
func firstScan(t *testing.T, data []byte) (head, scan, tail []byte) {
	t.Helper()
	for i := 2; i+4 <= len(data); {
		if data[i] != 0xff {
			t.Fatalf("no marker at %d", i)
		}
		n := int(data[i+2])<<8 | int(data[i+3])
		if data[i+1] != 0xda {
			i += 2 + n
			continue
		}
		// The scan's data runs to the next marker that is neither a stuffed byte nor a restart.
		j := i + 2 + n
		for ; j+1 < len(data) && !(data[j] == 0xff && data[j+1] != 0 && (data[j+1] < 0xd0 || data[j+1] > 0xd7)); j++ {
		}
		return data[:i], data[i:j], data[j:]
	}
	t.Fatal("no scan")
	return nil, nil, nil
}

// A file that repeats a scan many times costs the decoder a pass over the image per scan
// (a few bytes each): past MaxScansPerComponent scans of one component it is refused, before
// the work, by Decode, DecodeRegion and image by image of the standard library's corpus.
func TestScansPerComponentAreBounded(t *testing.T) {
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "src", "image", "testdata", "video-001.progressive.jpeg"))
	if err != nil {
		t.Fatal(err)
	}
	head, scan, tail := firstScan(t, data)
	// The first scan (every component's DC coefficients) given again and again: the file's
	// own scans are at most six a component.
	repeat := func(times int) []byte {
		out := bytes.Clone(head)
		for range times {
			out = append(out, scan...)
		}
		return append(out, tail...)
	}
	if _, err := Decode(bytes.NewReader(repeat(MaxScansPerComponent - 6))); err != nil {
		t.Fatalf("%d more scans of one component: %v", MaxScansPerComponent-6, err)
	}
	for _, times := range []int{MaxScansPerComponent + 1, 5000} {
		for name, decode := range map[string]func([]byte) error{
			"Decode":       func(b []byte) error { _, err := Decode(bytes.NewReader(b)); return err },
			"DecodeRegion": func(b []byte) error { _, err := DecodeRegion(bytes.NewReader(b), image.Rect(0, 0, 8, 8)); return err },
		} {
			err := decode(repeat(times))
			var unsupported UnsupportedError
			if !errors.As(err, &unsupported) || !strings.Contains(err.Error(), "scans of one component") {
				t.Errorf("%s of %d repeats of a scan: error %v, want the scan bound's", name, times, err)
			}
		}
	}
	for name, b := range corpus(t) {
		if _, err := Decode(bytes.NewReader(b)); err != nil && strings.Contains(err.Error(), "scans of one component") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
