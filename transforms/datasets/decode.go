package datasets

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// DefaultMaxPixels is the largest image (width × height) Decode accepts when Limits leave
// MaxPixels zero: 64 megapixels, far above the photos of the published datasets and well
// below what would exhaust a worker (decoding takes 3 to 4 bytes a pixel, about 256 MiB here).
const DefaultMaxPixels = 64_000_000

// DefaultMaxFileBytes is the largest encoded image file (or tar member) read into memory when
// a Spec leaves MaxFileBytes zero.
const DefaultMaxFileBytes = 64 << 20

// Image formats of encoded records.
const (
	FormatJPEG = "jpeg"
	FormatPNG  = "png"
)

// Limits bound what Decode accepts. The zero value means the defaults.
type Limits struct {
	// MaxPixels is the largest width × height accepted; 0 means DefaultMaxPixels.
	MaxPixels int64
}

func (l Limits) maxPixels() int64 {
	if l.MaxPixels <= 0 {
		return DefaultMaxPixels
	}
	return l.MaxPixels
}

// Sniff returns the format of an encoded image from its first bytes: FormatJPEG, FormatPNG or
// "" when it is neither.
func Sniff(data []byte) string {
	switch {
	case len(data) >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF:
		return FormatJPEG
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return FormatPNG
	}
	return ""
}

// Header holds what an image's header says, read without decoding the pixels.
type Header struct {
	Format        string // FormatJPEG or FormatPNG
	Width, Height int
}

// DecodeHeader reads the header of a JPEG or PNG and checks its dimensions against the
// limits, without decoding (and so without allocating) the pixels. format is the format the
// source claims ("jpeg", "png", or "" for unknown); the magic bytes decide, because real
// datasets hold files whose extension lies (ILSVRC-2012 has a PNG and CMYK JPEGs named
// .JPEG), and format is only used to word the error when the bytes are neither.
func DecodeHeader(data []byte, format string, l Limits) (Header, error) {
	got := Sniff(data)
	if len(data) == 0 {
		return Header{}, errors.New("empty file")
	}
	if got == "" {
		claimed := "a JPEG or PNG"
		if format != "" {
			claimed = "a " + format
		}
		return Header{}, fmt.Errorf("not %s image: starts with % x", claimed, data[:min(len(data), 8)])
	}
	// The decoder is chosen by the magic bytes rather than through image.DecodeConfig's
	// registry, so that formats other packages register (GIF, WebP) are never accepted.
	var cfg image.Config
	var err error
	if got == FormatJPEG {
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
	} else {
		cfg, err = png.DecodeConfig(bytes.NewReader(data))
	}
	if err != nil {
		return Header{}, fmt.Errorf("reading %s header: %w", got, err)
	}
	h := Header{Format: got, Width: cfg.Width, Height: cfg.Height}
	if h.Width <= 0 || h.Height <= 0 {
		return h, fmt.Errorf("%s header claims %dx%d pixels", got, h.Width, h.Height)
	}
	if px := int64(h.Width) * int64(h.Height); px > l.maxPixels() {
		return h, fmt.Errorf("%s header claims %dx%d = %d pixels, more than the limit of %d: refused before decoding",
			got, h.Width, h.Height, px, l.maxPixels())
	}
	return h, nil
}

// Decode decodes a JPEG or PNG into an Image (1 channel for grayscale sources, else RGB).
// It reads the header first and refuses images whose dimensions exceed the limits before any
// pixel memory is allocated (see DecodeHeader for format).
func Decode(data []byte, format string, l Limits) (transforms.Image, error) {
	h, err := DecodeHeader(data, format, l)
	if err != nil {
		return transforms.Image{}, err
	}
	var img image.Image
	if h.Format == FormatJPEG {
		img, err = jpeg.Decode(bytes.NewReader(data))
	} else {
		img, err = png.Decode(bytes.NewReader(data))
	}
	if err != nil {
		return transforms.Image{}, fmt.Errorf("decoding %dx%d %s: %w", h.Width, h.Height, h.Format, err)
	}
	if b := img.Bounds(); b.Dx() != h.Width || b.Dy() != h.Height {
		return transforms.Image{}, fmt.Errorf("%s decoded to %dx%d, header said %dx%d", h.Format, b.Dx(), b.Dy(), h.Width, h.Height)
	}
	return transforms.FromStd(img), nil
}
