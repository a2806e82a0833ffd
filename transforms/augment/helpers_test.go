package augment

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// sourceImage is a deterministic test image: byte i of an h×w×c image is
// (7i + 13·row + i² mod 11) mod 256, the formula testdata/pillow_reference.py uses.
func sourceImage(h, w, c int) transforms.Image {
	m := transforms.NewImage(h, w, c)
	for i := range m.Pix {
		m.Pix[i] = uint8((i*7 + (i/(w*c))*13 + (i*i)%11) % 256)
	}
	return m
}

// photoImage is a smooth image with some texture, closer to a photo than sourceImage.
func photoImage(h, w, c int, seed uint64) transforms.Image {
	r := rand.New(rand.NewPCG(seed, 7))
	m := transforms.NewImage(h, w, c)
	for y := range h {
		for x := range w {
			for k := range c {
				v := 40 + (x*150)/w + (y*50)/h + k*20 + r.IntN(24)
				m.Pix[(y*w+x)*c+k] = uint8(min(v, 255))
			}
		}
	}
	return m
}

func randomImage(h, w, c int, r *rand.Rand) transforms.Image {
	m := transforms.NewImage(h, w, c)
	for i := range m.Pix {
		m.Pix[i] = uint8(r.IntN(256))
	}
	return m
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
