package datasets

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"runtime"
	"sync"

	jpegdec "github.com/dcl-beam/dcl-beam/internal/jpeg"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// DefaultMaxPixels is the largest image (width × height) Decode accepts when Limits leave
// MaxPixels zero: 64 megapixels, far above the photos of the published datasets.
const DefaultMaxPixels = 64_000_000

// DefaultMaxDecodeBytes is the most memory one image's decoding may take when Limits leave
// MaxDecodeBytes zero, counted from its header (DecodeBytes): 256 MiB, a 64-megapixel 8-bit
// RGBA PNG; a 16-bit PNG, twice the bytes a pixel, is refused above 32 megapixels.
const DefaultMaxDecodeBytes = 256 << 20

// DefaultDecodeBudget is the most memory every decoding of the process takes together
// (SetDecodeBudget changes it): decodes that would exceed it wait for others to finish, so
// that workers decoding large images side by side do not add up past it. It holds the
// largest image Limits allow (its decoded and its converted pixels) and then some.
const DefaultDecodeBudget = 768 << 20

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
	// MaxDecodeBytes is the most memory decoding one image may take (Header.DecodeBytes);
	// 0 means DefaultMaxDecodeBytes.
	MaxDecodeBytes int64
}

func (l Limits) maxPixels() int64 {
	if l.MaxPixels <= 0 {
		return DefaultMaxPixels
	}
	return l.MaxPixels
}

func (l Limits) maxDecodeBytes() int64 {
	if l.MaxDecodeBytes <= 0 {
		return DefaultMaxDecodeBytes
	}
	return l.MaxDecodeBytes
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
	// DecodeBytes is the memory the decoder allocates for the pixels: bytes a pixel of the
	// image's colour model (1 for grey or a palette, 2 for 16-bit grey, 4 for RGBA, 8 for
	// 16-bit RGBA; a JPEG's components, and 4 more bytes a pixel per component for the
	// coefficients of a progressive one; twice that for an interlaced PNG) times the pixels.
	DecodeBytes int64
	// Channels is what Decode makes of it: 1 for grey sources, else 3.
	Channels int
}

// heldBytes is what decoding the image holds at its peak: the decoder's pixels and the
// converted copy Decode returns.
func (h Header) heldBytes() int64 {
	return h.DecodeBytes + int64(h.Width)*int64(h.Height)*int64(h.Channels)
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
	px := int64(h.Width) * int64(h.Height)
	if px > l.maxPixels() {
		return h, fmt.Errorf("%s header claims %dx%d = %d pixels, more than the limit of %d: refused before decoding",
			got, h.Width, h.Height, px, l.maxPixels())
	}
	perPixel, channels := pixelBytes(cfg.ColorModel)
	kind := ""
	switch {
	case got == FormatJPEG && progressiveJPEG(data):
		perPixel += 4 * jpegComponents(cfg.ColorModel) // the decoder keeps every DCT coefficient as an int32
		kind = " (progressive: its coefficients kept)"
	case got == FormatPNG && interlacedPNG(data):
		// The decoder decodes each of Adam7's seven passes into an image of its own, which
		// together hold every pixel once, and merges them into the whole image.
		perPixel *= 2
		kind = " (interlaced: its passes decoded apart, then merged)"
	}
	h.DecodeBytes, h.Channels = px*perPixel, channels
	if h.DecodeBytes > l.maxDecodeBytes() {
		return h, fmt.Errorf("%s header claims %dx%d pixels of %d bytes each to decode%s, %d MiB, more than the limit of %d MiB: refused before decoding",
			got, h.Width, h.Height, perPixel, kind, h.DecodeBytes>>20, l.maxDecodeBytes()>>20)
	}
	return h, nil
}

// interlacedPNG reports whether a PNG's header (IHDR, the first chunk, which DecodeConfig
// has read) says Adam7 interlacing.
func interlacedPNG(data []byte) bool {
	const ihdr = 8 + 8 // the signature, then the chunk's length and type
	return len(data) > ihdr+12 && string(data[12:16]) == "IHDR" && data[ihdr+12] == 1
}

// pixelBytes is what the standard decoders allocate a pixel for a colour model, and the
// channels Decode converts it to.
func pixelBytes(m color.Model) (perPixel int64, channels int) {
	switch m {
	case color.GrayModel:
		return 1, 1
	case color.Gray16Model:
		return 2, 1
	case color.RGBAModel, color.NRGBAModel, color.CMYKModel:
		return 4, 3
	case color.RGBA64Model, color.NRGBA64Model:
		return 8, 3
	case color.YCbCrModel:
		return 3, 3 // 4:4:4 at most
	}
	if _, ok := m.(color.Palette); ok {
		return 1, 3
	}
	return 8, 3 // unknown: the widest
}

func jpegComponents(m color.Model) int64 {
	switch m {
	case color.GrayModel:
		return 1
	case color.CMYKModel:
		return 4
	}
	return 3
}

// progressiveJPEG reports whether a JPEG's frame header (SOF) is progressive, walking its
// segments up to the first scan.
func progressiveJPEG(data []byte) bool {
	for i := 2; i+4 <= len(data); {
		if data[i] != 0xFF {
			return false
		}
		marker := data[i+1]
		switch {
		case marker == 0xFF:
			i++ // fill byte
			continue
		case marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01:
			i += 2 // markers without a length
			continue
		case marker == 0xDA || marker == 0xD9: // the first scan, or the end: no SOF seen
			return false
		case marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC:
			return marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE
		}
		i += 2 + int(data[i+2])<<8 | int(data[i+3])
	}
	return false
}

// decodeBudget is the process's DefaultDecodeBudget: what every decoding in flight holds
// together.
var decodeBudget = newBudget(DefaultDecodeBudget)

// SetDecodeBudget sets the most memory the process's decodings hold together; it returns
// the previous budget.
func SetDecodeBudget(n int64) int64 {
	decodeBudget.mu.Lock()
	defer decodeBudget.mu.Unlock()
	prev := decodeBudget.capacity
	decodeBudget.capacity = n
	decodeBudget.cond.Broadcast()
	return prev
}

// budget is a count of bytes that goroutines take and give back, waiting while it is spent.
type budget struct {
	mu             sync.Mutex
	cond           *sync.Cond
	capacity, used int64
}

func newBudget(n int64) *budget {
	b := &budget{capacity: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// take waits until n bytes are free (or nothing is taken: an image larger than the budget
// then decodes alone) and takes them.
func (b *budget) take(n int64) {
	b.mu.Lock()
	for b.used > 0 && b.used+n > b.capacity {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
}

// give gives back n bytes taken.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Decode decodes a JPEG or PNG into an Image (1 channel for grayscale sources, else RGB).
// It reads the header first and refuses images whose dimensions or decoding memory exceed
// the limits before any pixel memory is allocated (see DecodeHeader for format); the
// decoding itself waits its turn in the process's decode budget (SetDecodeBudget).
func Decode(data []byte, format string, l Limits) (transforms.Image, error) {
	img, release, err := DecodeHeld(data, format, l)
	release()
	return img, err
}

// DecodeHeld is Decode for a caller that keeps the image a while (to augment it): the image
// stays counted in the process's decode budget until the caller calls release (always
// non-nil; calling it twice does no harm).
func DecodeHeld(data []byte, format string, l Limits) (img transforms.Image, release func(), err error) {
	h, err := DecodeHeader(data, format, l)
	if err != nil {
		return transforms.Image{}, func() {}, err
	}
	held := h.heldBytes()
	decodeBudget.take(held)
	out, err := decodePixels(data, h)
	// The decoder's pixels are garbage once converted: collect a large image's now, so that
	// the next decoding reuses the memory instead of growing the heap past the budget.
	if h.DecodeBytes >= collectAbove {
		runtime.GC()
	}
	decodeBudget.give(h.DecodeBytes)
	rest := held - h.DecodeBytes
	var once sync.Once
	release = func() { once.Do(func() { decodeBudget.give(rest) }) }
	if err != nil {
		release()
		return transforms.Image{}, func() {}, err
	}
	return out, release, nil
}

// collectAbove is the decoder allocation from which Decode collects the garbage at once.
const collectAbove = 32 << 20

func decodePixels(data []byte, h Header) (transforms.Image, error) {
	var err error
	var img image.Image
	if h.Format == FormatJPEG {
		img, err = jpegdec.Decode(bytes.NewReader(data))
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
