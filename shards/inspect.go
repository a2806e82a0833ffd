package shards

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// InspectedRow is one row Inspect looked at.
type InspectedRow struct {
	Row   int    `json:"row"`
	Key   string `json:"key"`
	Index int64  `json:"index"`
	Label int32  `json:"label"`
	Pass  int32  `json:"pass"`
	PNG   string `json:"png,omitempty"`
}

// Inspect reads the first n rows of the dataset in dir, in manifest order, and, when outDir
// is not empty, writes each as a PNG there: view 1 and view 2 side by side, enlarged by
// scale (0: enough for the shorter side to reach 128 px), named
// NNNN-passPPP-labelL-KEY.png so a person can find a row by its key, label and pass.
func Inspect(ctx context.Context, dir, outDir string, n, scale int) ([]InspectedRow, error) {
	if n <= 0 {
		return nil, fmt.Errorf("rows = %d: want at least 1", n)
	}
	r, err := NewSequentialReader(ctx, dir, min(n, 64))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []InspectedRow
	for len(out) < n {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, err
		}
		if scale <= 0 {
			scale = max(1, (128+min(b.H, b.W)-1)/min(b.H, b.W))
		}
		for i := 0; i < b.Len && len(out) < n; i++ {
			row := InspectedRow{Row: len(out), Key: b.Keys[i], Index: b.Indices[i], Label: b.Labels[i], Pass: b.Passes[i]}
			if outDir != "" {
				views := []transforms.Image{b.Image(1, i)}
				if b.Views == 2 {
					views = append(views, b.Image(2, i))
				}
				name := fmt.Sprintf("%04d-pass%03d-label%d-%s.png", row.Row, row.Pass, row.Label, safeName(row.Key))
				row.PNG = storage.Join(outDir, name)
				var buf bytes.Buffer
				if err := png.Encode(&buf, sideBySide(views, scale)); err != nil {
					return out, fmt.Errorf("encoding %s: %w", row.PNG, err)
				}
				if err := storage.WriteFile(ctx, row.PNG, buf.Bytes()); err != nil {
					return out, err
				}
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// sideBySide draws the views left to right on a grey background with a gap between them,
// each pixel enlarged to scale×scale.
func sideBySide(views []transforms.Image, scale int) image.Image {
	const gap = 4
	h, w := views[0].H*scale, views[0].W*scale
	out := image.NewRGBA(image.Rect(0, 0, len(views)*w+(len(views)-1)*gap, h))
	for i := range out.Pix {
		out.Pix[i] = 128
	}
	for v, m := range views {
		x0 := v * (w + gap)
		for y := range h {
			for x := range w {
				p := ((y/scale)*m.W + x/scale) * m.C
				c := color.RGBA{m.Pix[p], m.Pix[p], m.Pix[p], 255}
				if m.C == 3 {
					c.G, c.B = m.Pix[p+1], m.Pix[p+2]
				}
				out.SetRGBA(x0+x, y, c)
			}
		}
	}
	return out
}

// safeName keeps a key readable in a file name: letters, digits, '.', '-' and '_' stay,
// anything else (the slashes of ImageNet paths) becomes '_'.
func safeName(key string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, key)
	if len(s) > 80 {
		s = s[len(s)-80:]
	}
	return s
}
