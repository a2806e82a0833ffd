package shards

import (
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/transforms"
)

func TestEncodeDecodeViews(t *testing.T) {
	smooth := transforms.NewImage(24, 32, 3)
	for y := range 24 {
		for x := range 32 {
			i := (y*32 + x) * 3
			smooth.Pix[i], smooth.Pix[i+1], smooth.Pix[i+2] = uint8(4*x), uint8(8*y), uint8(2*(x+y))
		}
	}
	gray := transforms.NewImage(9, 7, 1)
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 3)
	}
	for _, img := range []transforms.Image{smooth, gray} {
		for _, enc := range []Encoding{Raw, PNG, JPEG} {
			data, err := EncodeView(img, enc)
			if err != nil {
				t.Fatal(err)
			}
			var got transforms.Image
			if err := DecodeView(data, enc, img.H, img.W, img.C, &got); err != nil {
				t.Fatalf("%s %dx%dx%d: %v", enc, img.H, img.W, img.C, err)
			}
			if err := checkViewHeader(data, enc, img.H, img.W, img.C); err != nil {
				t.Errorf("%s header: %v", enc, err)
			}
			var diff float64
			for i := range got.Pix {
				d := float64(got.Pix[i]) - float64(img.Pix[i])
				diff += max(d, -d)
			}
			diff /= float64(len(got.Pix))
			if (enc != JPEG && diff != 0) || diff > 2 {
				t.Errorf("%s %dx%dx%d: mean error %.2f", enc, img.H, img.W, img.C, diff)
			}
			// A view whose row claims another size is refused, not misread.
			if err := DecodeView(data, enc, img.H+1, img.W, img.C, &got); err == nil {
				t.Errorf("%s: a wrong size was accepted", enc)
			}
		}
	}
	if _, err := ParseEncoding("webp"); err == nil || !strings.Contains(err.Error(), "raw, png or jpeg") {
		t.Errorf("ParseEncoding(webp) = %v", err)
	}
	if err := DecodeView([]byte("garbage"), JPEG, 4, 4, 3, &transforms.Image{}); err == nil {
		t.Error("garbage decoded as JPEG")
	}
}

func TestSourcesChecksum(t *testing.T) {
	a := []Source{{"train.bin", "aa"}, {"test.bin", "bb"}}
	b := []Source{{"test.bin", "bb"}, {"train.bin", "aa"}}
	c := []Source{{"train.bin", "aa"}, {"test.bin", "bc"}}
	if SourcesChecksum(a) != SourcesChecksum(b) {
		t.Error("the order of the sources changed the checksum")
	}
	if SourcesChecksum(a) == SourcesChecksum(c) || !strings.HasPrefix(SourcesChecksum(a), "sha256:") {
		t.Errorf("checksums %s, %s", SourcesChecksum(a), SourcesChecksum(c))
	}
	p := t.TempDir() + "/f"
	if err := storage.WriteFile(t.Context(), p, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	sum, n, err := ChecksumFile(t.Context(), p)
	if err != nil || n != 3 || sum != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("ChecksumFile = %s, %d, %v", sum, n, err)
	}
}

// TestTrainerViewsTellTheModesApart: stored JPEG views and views made on the fly are other
// pixels, and a configuration says so; lossless stored views are the same pixels.
func TestTrainerViewsTellTheModesApart(t *testing.T) {
	for _, tt := range []struct {
		enc    Encoding
		differ bool
	}{{JPEG, true}, {Raw, false}, {PNG, false}} {
		stored := Config{Encoding: tt.enc, Views: 2}
		online := Config{Encoding: tt.enc, Views: 2, Online: true}
		if stored.ModesDiffer() != tt.differ || online.ModesDiffer() != tt.differ {
			t.Errorf("%s: ModesDiffer %v and %v, want %v", tt.enc, stored.ModesDiffer(), online.ModesDiffer(), tt.differ)
		}
		if tt.differ && !strings.Contains(stored.TrainerViews(), "JPEG") || !strings.Contains(online.TrainerViews(), "raw") {
			t.Errorf("%s: TrainerViews %q and %q", tt.enc, stored.TrainerViews(), online.TrainerViews())
		}
	}
}
