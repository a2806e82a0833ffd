package shards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"

	jpegdec "github.com/dcl-beam/dcl-beam/internal/jpeg"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// Base images: what views are cut from. Preprocessing makes both kinds of dataset from them,
// stored views (every pass) and base shards (Config.Online), so that the two agree byte for
// byte: an image is brought to the dataset's channels, shrunk when its longer side exceeds
// MaxSide, and, in base shards, stored in the dataset's encoding; the views of both kinds are
// cut from the base as a reader decodes it (DecodeBase). A published JPEG that needs no
// shrinking is stored as it is (its bytes, no second lossy encoding), and a stored view pass
// decodes the same bytes with the same decoder.

// BaseSize is the size of the base of an h×w image: unchanged when its longer side is at most
// MaxSide (or MaxSide is 0), else scaled so that the longer side is MaxSide and the shorter
// rounded to the nearest pixel (at least 1), as FFCV's max_resolution does.
func (c *Config) BaseSize(h, w int) (int, int) {
	long, short := max(h, w), min(h, w)
	if c.MaxSide <= 0 || long <= c.MaxSide {
		return h, w
	}
	short = max(1, (short*c.MaxSide+long/2)/long)
	if h >= w {
		return c.MaxSide, short
	}
	return short, c.MaxSide
}

// KeepsFile reports whether a published image file (format "jpeg" or "png", h×w) is stored
// in base shards as it is: one that needs no shrinking, whatever the views' encoding (the
// file is smaller than its pixels, and decoding it is what a pass of stored views does
// too). Base images of decoded records (CIFAR, STL-10, IDX) are raw pixels, and shrunk
// images are stored in the dataset's encoding.
func (c *Config) KeepsFile(format string, h, w int) bool {
	bh, bw := c.BaseSize(h, w)
	return (format == string(JPEG) || format == string(PNG)) && bh == h && bw == w
}

// BaseMaker makes base images; it reuses its buffers and is not safe for concurrent use.
type BaseMaker struct {
	cfg     *Config
	resizer *augment.Augmenter
	small   transforms.Image
}

// NewBaseMaker returns a BaseMaker for a dataset's configuration.
func NewBaseMaker(cfg *Config) (*BaseMaker, error) {
	// Resize uses only the augmenter's resampler, whatever its preset.
	aug, err := cfg.AugmentConfig()
	if err != nil {
		return nil, err
	}
	a, err := augment.New(aug)
	if err != nil {
		return nil, err
	}
	return &BaseMaker{cfg: cfg, resizer: a}, nil
}

// Shrink returns img (with the dataset's channels) at its base size: img itself when it
// needs no shrinking, else a resized copy in the maker's buffer (valid until the next call),
// and whether it shrank.
func (m *BaseMaker) Shrink(img transforms.Image) (transforms.Image, bool, error) {
	h, w := m.cfg.BaseSize(img.H, img.W)
	if h == img.H && w == img.W {
		return img, false, nil
	}
	if err := m.resizer.Resize(&m.small, img, h, w); err != nil {
		return transforms.Image{}, false, err
	}
	return m.small, true, nil
}

// Encode returns the stored form of a base image that Shrink returned: its encoding and
// bytes (a copy). Images that were shrunk are stored in the dataset's encoding, others raw.
func (m *BaseMaker) Encode(img transforms.Image, shrunk bool) (Encoding, []byte, error) {
	e := Raw
	if shrunk {
		e = m.cfg.Encoding
	}
	data, err := EncodeView(img, e)
	return e, data, err
}

// DecodeBase decodes a base image of h×w (a base row's View1, or a published JPEG that is
// its own base) into an image with c channels. Raw bytes are used in place (the result
// shares data); other encodings are decoded into dst, whose buffer is reused, and converted
// to c channels as preprocessing converts them (transforms.ToChannels). The decoders are
// those a pass of stored views decoded (image/png; for JPEG the faster fork of image/jpeg in
// internal/jpeg, whose images are the standard library's), so both agree byte for byte.
func DecodeBase(data []byte, e Encoding, h, w, c int, dst, scratch *transforms.Image) (transforms.Image, error) {
	return DecodeBaseRegion(data, e, h, w, c, image.Rect(0, 0, w, h), dst, scratch)
}

// DecodeBaseRegion is DecodeBase for a caller that reads only the pixels inside region: those
// are DecodeBase's, byte for byte, and the others are unspecified. A JPEG is decoded with
// internal/jpeg's DecodeRegion, which skips the blocks outside region and stops after its
// last row; other encodings are decoded whole.
func DecodeBaseRegion(data []byte, e Encoding, h, w, c int, region image.Rectangle, dst, scratch *transforms.Image) (transforms.Image, error) {
	if h <= 0 || w <= 0 || (c != 1 && c != 3) {
		return transforms.Image{}, fmt.Errorf("base image size %dx%dx%d is not a valid image size", h, w, c)
	}
	switch e {
	case Raw:
		if len(data) != h*w*c {
			return transforms.Image{}, fmt.Errorf("raw base image has %d bytes, want %dx%dx%d = %d", len(data), h, w, c, h*w*c)
		}
		return transforms.Image{Pix: data, H: h, W: w, C: c}, nil
	case PNG, JPEG:
		// The header first: the decoder allocates pixels for the size the file claims, which
		// a damaged or forged file need not share with its row.
		if err := checkImageHeader("base image", data, e, h, w, c); err != nil {
			return transforms.Image{}, err
		}
		var img image.Image
		var err error
		if e == JPEG {
			img, err = jpegdec.DecodeRegion(bytes.NewReader(data), region)
		} else {
			img, err = decodeStd(data, e)
		}
		if err != nil {
			return transforms.Image{}, fmt.Errorf("decoding %dx%d %s base image: %w", w, h, e, err)
		}
		if b := img.Bounds(); b.Dy() != h || b.Dx() != w {
			return transforms.Image{}, fmt.Errorf("%s base image is %dx%d, the row says %dx%d", e, b.Dy(), b.Dx(), h, w)
		}
		transforms.FromStdInto(scratch, img)
		if scratch.C == c {
			return *scratch, nil
		}
		transforms.ToChannelsInto(dst, *scratch, c)
		return *dst, nil
	}
	return transforms.Image{}, fmt.Errorf("encoding %q: want raw, png or jpeg", e)
}

// AugmentConfig returns the augmentation the configuration records (Config.Augment).
func (c *Config) AugmentConfig() (augment.Config, error) {
	var a augment.Config
	if err := json.Unmarshal(c.Augment, &a); err != nil {
		return a, fmt.Errorf("the dataset's augmentation config: %w", err)
	}
	return a, a.Validate()
}

// viewMaker makes the views of base rows: one per decoding goroutine of a Reader.
type viewMaker struct {
	aug          *augment.Augmenter
	dst, scratch transforms.Image
	view         transforms.Image
	plans        []augment.Plan
}

// views writes the views of one base row for epoch into dsts (each exactly H·W·C bytes). The
// views' plans come first: a view reads only its crop of the base image, so only the union
// of the crops is decoded (DecodeBaseRegion).
func (v *viewMaker) views(cfg *Config, row *Row, epoch int, dsts ...[]uint8) error {
	h, w := int(row.Height), int(row.Width)
	v.plans = v.plans[:0]
	region := image.Rect(0, 0, w, h)
	if !v.aug.Config().Eval && epoch >= 0 { // else ViewInto's whole-image path and its errors
		region = image.Rectangle{}
		for i := range dsts {
			p := v.aug.Plan(h, w, cfg.Seed, row.Key, epoch, i)
			v.plans = append(v.plans, p)
			region = region.Union(image.Rect(p.CropLeft, p.CropTop, p.CropLeft+p.CropW, p.CropTop+p.CropH))
		}
	}
	src, err := DecodeBaseRegion(row.View1, Encoding(row.Encoding), h, w, cfg.Channels, region, &v.dst, &v.scratch)
	if err != nil {
		return err
	}
	for i, d := range dsts {
		v.view.Pix = d
		if len(v.plans) == 0 {
			err = v.aug.ViewInto(&v.view, src, cfg.Seed, row.Key, epoch, i)
		} else if err = v.aug.Apply(&v.view, src, v.plans[i]); err != nil {
			err = fmt.Errorf("augmenting %q: %w", row.Key, err)
		}
		if err != nil {
			return err
		}
		if &v.view.Pix[0] != &d[0] || v.view.H != cfg.Height || v.view.W != cfg.Width || v.view.C != cfg.Channels {
			return fmt.Errorf("view %d is %dx%dx%d, the dataset's views are %dx%dx%d", i+1, v.view.H, v.view.W, v.view.C, cfg.Height, cfg.Width, cfg.Channels)
		}
	}
	return nil
}
