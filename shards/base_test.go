package shards

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"runtime"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// A view made from a JPEG base decoded only where the views' crops lie (DecodeBaseRegion) is
// the view of the whole decoded image, for many keys and epochs of every training preset.
func TestViewsDecodeOnlyTheirCropsExactly(t *testing.T) {
	for _, preset := range []string{augment.SimCLRImageNet, augment.SimCLRCIFAR, augment.BYOL} {
		aug, err := augment.Preset(preset, 64)
		if err != nil {
			t.Fatal(err)
		}
		a, err := augment.New(aug)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &Config{Seed: 3, Height: 64, Width: 64, Channels: 3}
		data := testfiles.PhotoJPEG(t, 150, 101, 1)
		whole, err := DecodeBase(data, JPEG, 101, 150, 3, &transforms.Image{}, &transforms.Image{})
		if err != nil {
			t.Fatal(err)
		}
		whole.Pix = bytes.Clone(whole.Pix)
		vm := &viewMaker{aug: a}
		got := [][]uint8{make([]uint8, 64*64*3), make([]uint8, 64*64*3)}
		for i := range 40 {
			row := &Row{Key: fmt.Sprint("k", i), View1: data, Height: 101, Width: 150, Encoding: string(JPEG)}
			if err := vm.views(cfg, row, i%5, got...); err != nil {
				t.Fatal(err)
			}
			for view := range got {
				want, err := a.View(whole, cfg.Seed, row.Key, i%5, view)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[view], want.Pix) {
					t.Fatalf("%s, %s epoch %d view %d: differs from the view of the whole image", preset, row.Key, i%5, view)
				}
			}
		}
	}
}

// A base image whose file disagrees with its row's size is refused from its header, before
// the decoder allocates the pixels the file claims.
func TestBaseImageHeaderIsCheckedFirst(t *testing.T) {
	const side = 1024
	gray := image.NewGray(image.Rect(0, 0, side, side))
	for _, e := range []Encoding{JPEG, PNG} {
		var buf bytes.Buffer
		var err error
		if e == JPEG {
			err = jpeg.Encode(&buf, gray, &jpeg.Options{Quality: 50})
		} else {
			err = png.Encode(&buf, gray)
		}
		if err != nil {
			t.Fatal(err)
		}
		var dst, scratch transforms.Image
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = DecodeBase(buf.Bytes(), e, 16, 16, 1, &dst, &scratch)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s base image is %dx%d, the row says 16x16", e, side, side)) {
			t.Errorf("%s of %dx%d in a 16x16 row: error %v", e, side, side, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got >= side*side/4 {
			t.Errorf("%s of %dx%d in a 16x16 row: %d bytes allocated to refuse it, the pixels are %d", e, side, side, got, side*side)
		}
	}
}
