package transforms

import (
	"fmt"
	"image"
	"image/color"
)

// Image is an 8-bit image stored row by row, pixel by pixel, channel by channel (HWC), the
// layout the shards store raw views in. C is 1 (grayscale) or 3 (RGB).
type Image struct {
	Pix     []uint8
	H, W, C int
}

// NewImage returns a black image of the given size.
func NewImage(h, w, c int) Image {
	return Image{Pix: make([]uint8, h*w*c), H: h, W: w, C: c}
}

// Validate reports whether the sizes are consistent and the channel count supported.
func (m Image) Validate() error {
	switch {
	case m.H <= 0 || m.W <= 0:
		return fmt.Errorf("image size %dx%d: both sides must be positive", m.H, m.W)
	case m.C != 1 && m.C != 3:
		return fmt.Errorf("image has %d channels: want 1 or 3", m.C)
	case len(m.Pix) != m.H*m.W*m.C:
		return fmt.Errorf("image %dx%dx%d needs %d bytes, has %d", m.H, m.W, m.C, m.H*m.W*m.C, len(m.Pix))
	}
	return nil
}

// FromStd converts a decoded standard-library image to an Image: grayscale images (and
// 16-bit grayscale) keep one channel, everything else becomes RGB, alpha dropped.
func FromStd(src image.Image) Image {
	b := src.Bounds()
	h, w := b.Dy(), b.Dx()
	switch s := src.(type) {
	case *image.Gray:
		m := NewImage(h, w, 1)
		for y := 0; y < h; y++ {
			copy(m.Pix[y*w:(y+1)*w], s.Pix[y*s.Stride:y*s.Stride+w])
		}
		return m
	case *image.Gray16:
		m := NewImage(h, w, 1)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				m.Pix[y*w+x] = uint8(s.Gray16At(b.Min.X+x, b.Min.Y+y).Y >> 8)
			}
		}
		return m
	case *image.RGBA:
		m := NewImage(h, w, 3)
		for y := 0; y < h; y++ {
			row := s.Pix[y*s.Stride:]
			for x := 0; x < w; x++ {
				copy(m.Pix[(y*w+x)*3:(y*w+x)*3+3], row[x*4:x*4+3])
			}
		}
		return m
	case *image.YCbCr:
		var m Image
		fromYCbCrInto(&m, s)
		return m
	}
	m := NewImage(h, w, 3)
	// The bytes are color.NRGBAModel.Convert(src.At(x, y))'s, without At's per-pixel
	// allocation: a colour in an interface is boxed, which for a 16-bit PNG is more garbage
	// than the decoder's pixels, none of it counted in the decode budget.
	switch s := src.(type) {
	case *image.NRGBA:
		// NRGBAModel gives an NRGBA back as it is: its colour, alpha dropped.
		for y := range h {
			row := s.Pix[(b.Min.Y+y-s.Rect.Min.Y)*s.Stride+(b.Min.X-s.Rect.Min.X)*4:]
			for x := range w {
				copy(m.Pix[(y*w+x)*3:][:3], row[x*4:x*4+3])
			}
		}
		return m
	case *image.Paletted:
		var lut [256][3]uint8
		for i, c := range s.Palette[:min(len(s.Palette), 256)] {
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			lut[i] = [3]uint8{n.R, n.G, n.B}
		}
		for y := range h {
			for x := range w {
				i := s.ColorIndexAt(b.Min.X+x, b.Min.Y+y)
				if int(i) >= len(s.Palette) {
					continue // At's colour is transparent black: black
				}
				copy(m.Pix[(y*w+x)*3:][:3], lut[i][:])
			}
		}
		return m
	case image.RGBA64Image:
		// RGBA64At is At(x, y).RGBA() for the standard images left (16-bit, CMYK).
		for y := range h {
			for x := range w {
				c := s.RGBA64At(b.Min.X+x, b.Min.Y+y)
				rgb := unpremultiply(uint32(c.R), uint32(c.G), uint32(c.B), uint32(c.A))
				copy(m.Pix[(y*w+x)*3:][:3], rgb[:])
			}
		}
		return m
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.NRGBAModel.Convert(src.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
			i := (y*w + x) * 3
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = c.R, c.G, c.B
		}
	}
	return m
}

// unpremultiply is color.NRGBAModel's arithmetic on an alpha-premultiplied 16-bit colour,
// its 8-bit colour channels.
func unpremultiply(r, g, b, a uint32) [3]uint8 {
	switch a {
	case 0xffff:
	case 0:
		r, g, b = 0, 0, 0
	default:
		r, g, b = r*0xffff/a, g*0xffff/a, b*0xffff/a
	}
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}

// FromStdInto is FromStd writing into dst, whose buffer is reused when it is large enough:
// decoding loops (the shard reader, the augmenting DoFns) convert without allocating.
func FromStdInto(dst *Image, src image.Image) {
	if s, ok := src.(*image.YCbCr); ok {
		fromYCbCrInto(dst, s)
		return
	}
	m := FromStd(src)
	dst.resize(m.H, m.W, m.C)
	copy(dst.Pix, m.Pix)
}

// resize sets the size of m, reusing its buffer when it is large enough.
func (m *Image) resize(h, w, c int) {
	n := h * w * c
	if cap(m.Pix) < n {
		m.Pix = make([]uint8, n)
	}
	m.Pix = m.Pix[:n]
	m.H, m.W, m.C = h, w, c
}

// fromYCbCrInto converts a decoded JPEG row by row: the chroma index advances every pixel
// (4:4:4) or every other pixel (4:2:0, 4:2:2) instead of being recomputed per pixel, which
// makes JPEG decoding for ImageNet about 0.4 ms per image cheaper. The arithmetic is
// color.YCbCrToRGB's, so the bytes are the same.
func fromYCbCrInto(m *Image, s *image.YCbCr) {
	b := s.Bounds()
	h, w := b.Dy(), b.Dx()
	var shift int
	switch s.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
	case image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio422:
		shift = 1
	default:
		ref := fromYCbCrPerPixel(s)
		m.resize(h, w, 3)
		copy(m.Pix, ref.Pix)
		return
	}
	m.resize(h, w, 3)
	// Pixel X's chroma sample is X>>shift - Min.X>>shift past COffset(Min.X, Y).
	odd := b.Min.X & shift
	for y := range h {
		yrow := s.Y[s.YOffset(b.Min.X, b.Min.Y+y):][:w]
		c0 := s.COffset(b.Min.X, b.Min.Y+y)
		out := m.Pix[y*w*3:][:w*3]
		done := 0
		if n := max(0, w-2) &^ 7; hasYCbCrVec && odd == 0 && n > 0 {
			ycbcrRowAVX2(&out[0], &yrow[0], &s.Cb[c0], &s.Cr[c0], n, shift)
			done = n
		}
		for x := done; x < w; x++ {
			yv := yrow[x]
			ci := c0 + (x+odd)>>shift
			yy := int32(yv) * 0x10101
			cb := int32(s.Cb[ci]) - 128
			cr := int32(s.Cr[ci]) - 128
			o := out[x*3:][:3]
			o[0] = clampYCbCr(yy + 91881*cr)
			o[1] = clampYCbCr(yy - 22554*cb - 46802*cr)
			o[2] = clampYCbCr(yy + 116130*cb)
		}
	}
}

// clampYCbCr is color.YCbCrToRGB's clamp of a 16.16 fixed-point value to 0..255.
func clampYCbCr(v int32) uint8 {
	if uint32(v)&0xff000000 == 0 {
		return uint8(v >> 16)
	}
	return uint8(^(v >> 31))
}

// fromYCbCrPerPixel handles the rare subsampling ratios (4:4:0, 4:1:1, 4:1:0) and is the
// reference the fast path is tested against.
func fromYCbCrPerPixel(s *image.YCbCr) Image {
	b := s.Bounds()
	h, w := b.Dy(), b.Dx()
	m := NewImage(h, w, 3)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			yi := s.YOffset(b.Min.X+x, b.Min.Y+y)
			ci := s.COffset(b.Min.X+x, b.Min.Y+y)
			r, g, bl := color.YCbCrToRGB(s.Y[yi], s.Cb[ci], s.Cr[ci])
			i := (y*w + x) * 3
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = r, g, bl
		}
	}
	return m
}

// Std returns the image as a standard-library image (for PNG and JPEG encoding).
func (m Image) Std() image.Image {
	if m.C == 1 {
		g := image.NewGray(image.Rect(0, 0, m.W, m.H))
		copy(g.Pix, m.Pix)
		return g
	}
	out := image.NewRGBA(image.Rect(0, 0, m.W, m.H))
	for i := 0; i < m.H*m.W; i++ {
		copy(out.Pix[i*4:i*4+3], m.Pix[i*3:i*3+3])
		out.Pix[i*4+3] = 255
	}
	return out
}

// ToChannels converts an image to c channels: grey to RGB by copying the grey level, RGB to
// grey with ITU-R 601-2 luma as Pillow computes it (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16).
// An image that already has c channels is returned as it is, sharing its pixels.
func ToChannels(m Image, c int) Image {
	if m.C == c {
		return m
	}
	out := NewImage(m.H, m.W, c)
	ToChannelsInto(&out, m, c)
	return out
}

// ToChannelsInto is ToChannels writing into dst (reused when large enough), which must not
// share memory with m.
func ToChannelsInto(dst *Image, m Image, c int) {
	dst.resize(m.H, m.W, c)
	n := m.H * m.W
	switch {
	case m.C == c:
		copy(dst.Pix, m.Pix)
	case c == 3:
		for i := range n {
			v := m.Pix[i]
			dst.Pix[3*i], dst.Pix[3*i+1], dst.Pix[3*i+2] = v, v, v
		}
	default:
		for i := range n {
			r, g, b := uint32(m.Pix[3*i]), uint32(m.Pix[3*i+1]), uint32(m.Pix[3*i+2])
			dst.Pix[i] = uint8((19595*r + 38470*g + 7471*b + 1<<15) >> 16)
		}
	}
}
