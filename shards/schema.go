package shards

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"path"
	"regexp"
	"slices"
	"strconv"

	jpegdec "github.com/dcl-beam/dcl-beam/internal/jpeg"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// FormatVersion is the version of the shard format and of manifest.json. A reader refuses a
// manifest of any other version rather than guess at its meaning.
const FormatVersion = 1

// ManifestName is the file, directly in a dataset directory, that makes it a complete dataset.
const ManifestName = "manifest.json"

// Row is one row of a shard: one augmented view pair, or one image of an evaluation shard
// (View2 empty). Views hold the bytes of one image in the Encoding of the row.
//
// Column names are part of the format: other tools (pyarrow, DuckDB) read shards by them.
type Row struct {
	Key      string `parquet:"key,zstd"`
	Index    int64  `parquet:"source_index,zstd"`
	Label    int32  `parquet:"label,zstd"`
	Pass     int32  `parquet:"pass,zstd"`
	View1    []byte `parquet:"view1"`
	View2    []byte `parquet:"view2"`
	Height   int32  `parquet:"height,zstd"`
	Width    int32  `parquet:"width,zstd"`
	Channels int32  `parquet:"channels,zstd"`
	Encoding string `parquet:"encoding,dict,zstd"`
}

// Columns of Row that hold image bytes: no statistics, no bounds, no bloom filters.
var viewColumns = []string{"view1", "view2"}

// Unlabelled is the label of an example that has none (STL-10's unlabeled split).
const Unlabelled = -1

// Encoding is how a view's pixels are stored in a row.
type Encoding string

// The encodings of a view. Raw is uint8 HWC, exactly transforms.Image.Pix.
const (
	Raw  Encoding = "raw"
	PNG  Encoding = "png"
	JPEG Encoding = "jpeg"
)

// JPEGQuality is the quality of JPEG views (the design's choice for 224 px images). Go's
// encoder is deterministic, so the same view always gives the same bytes.
const JPEGQuality = 95

// ParseEncoding checks a user-given encoding name.
func ParseEncoding(s string) (Encoding, error) {
	switch e := Encoding(s); e {
	case Raw, PNG, JPEG:
		return e, nil
	}
	return "", fmt.Errorf("encoding %q: want raw, png or jpeg", s)
}

// EncodeView returns the bytes of img in encoding e.
func EncodeView(img transforms.Image, e Encoding) ([]byte, error) {
	if err := img.Validate(); err != nil {
		return nil, err
	}
	switch e {
	case Raw:
		return bytes.Clone(img.Pix), nil
	case PNG:
		var buf bytes.Buffer
		enc := png.Encoder{CompressionLevel: png.DefaultCompression}
		if err := enc.Encode(&buf, img.Std()); err != nil {
			return nil, fmt.Errorf("encoding PNG: %w", err)
		}
		return buf.Bytes(), nil
	case JPEG:
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img.Std(), &jpeg.Options{Quality: JPEGQuality}); err != nil {
			return nil, fmt.Errorf("encoding JPEG: %w", err)
		}
		return buf.Bytes(), nil
	}
	return nil, fmt.Errorf("encoding %q: want raw, png or jpeg", e)
}

// DecodeView decodes one view of a row into dst (resized to h×w×c), checking that the stored
// image has the size the row claims. dst may be reused across calls.
func DecodeView(data []byte, e Encoding, h, w, c int, dst *transforms.Image) error {
	if h <= 0 || w <= 0 || (c != 1 && c != 3) {
		return fmt.Errorf("view size %dx%dx%d is not a valid image size", h, w, c)
	}
	n := h * w * c
	if cap(dst.Pix) < n {
		dst.Pix = make([]uint8, n)
	}
	dst.Pix, dst.H, dst.W, dst.C = dst.Pix[:n], h, w, c
	switch e {
	case Raw:
		if len(data) != n {
			return fmt.Errorf("raw view has %d bytes, want %dx%dx%d = %d", len(data), h, w, c, n)
		}
		copy(dst.Pix, data)
		return nil
	case PNG, JPEG:
		img, err := decodeStd(data, e)
		if err != nil {
			return fmt.Errorf("decoding %s view: %w", e, err)
		}
		if ycc, ok := img.(*image.YCbCr); ok && c == 3 && ycc.Rect.Dy() == h && ycc.Rect.Dx() == w {
			transforms.FromStdInto(dst, ycc)
			return nil
		}
		m := transforms.FromStd(img)
		if m.H != h || m.W != w {
			return fmt.Errorf("%s view is %dx%d, the row says %dx%d", e, m.H, m.W, h, w)
		}
		switch {
		case m.C == c:
			copy(dst.Pix, m.Pix)
		case m.C == 3 && c == 1:
			// A grayscale view that went through an RGB path: take the first channel.
			for i := range h * w {
				dst.Pix[i] = m.Pix[3*i]
			}
		case m.C == 1 && c == 3:
			for i := range h * w {
				v := m.Pix[i]
				dst.Pix[3*i], dst.Pix[3*i+1], dst.Pix[3*i+2] = v, v, v
			}
		}
		return nil
	}
	return fmt.Errorf("encoding %q: want raw, png or jpeg", e)
}

// checkViewHeader checks cheaply (without decoding pixels) that a view's bytes agree with
// the row's size and encoding: raw views by length, PNG and JPEG by their headers.
func checkViewHeader(data []byte, e Encoding, h, w, c int) error {
	return checkImageHeader("view", data, e, h, w, c)
}

// checkImageHeader is checkViewHeader for an image of any role (what: "view", "base
// image"), named so in its errors.
func checkImageHeader(what string, data []byte, e Encoding, h, w, c int) error {
	switch e {
	case Raw:
		if len(data) != h*w*c {
			return fmt.Errorf("raw %s has %d bytes, want %dx%dx%d = %d", what, len(data), h, w, c, h*w*c)
		}
		return nil
	case PNG, JPEG:
		var (
			cfg image.Config
			err error
		)
		if e == PNG {
			cfg, err = png.DecodeConfig(bytes.NewReader(data))
		} else {
			cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
		}
		if err != nil {
			return fmt.Errorf("%s %s header: %w", e, what, err)
		}
		if cfg.Height != h || cfg.Width != w {
			return fmt.Errorf("%s %s is %dx%d, the row says %dx%d", e, what, cfg.Height, cfg.Width, h, w)
		}
		return nil
	}
	return fmt.Errorf("encoding %q: want raw, png or jpeg", e)
}

// Config is the configuration of a preprocessing run: everything that decides the bytes of
// its shards. It is stored in the manifest and, whole, in every shard's footer, so a shard
// always says where it came from, and two runs are "the same dataset" exactly when their
// Configs are equal.
type Config struct {
	Dataset string `json:"dataset"`
	Split   string `json:"split"`
	// Preset is the augmentation preset's name; Augment is the full augmentation config as
	// JSON (every parameter, after flag overrides), kept verbatim.
	Preset  string          `json:"preset"`
	Augment json.RawMessage `json:"augment"`
	Seed    uint64          `json:"seed"`
	// Passes is E, the number of augmented passes; the trainer's epoch e reads pass e mod E.
	Passes int `json:"passes"`
	// Parts is the number of shards per pass.
	Parts    int      `json:"parts"`
	Views    int      `json:"views"` // 2 for view pairs, 1 for evaluation shards
	Encoding Encoding `json:"encoding"`
	Height   int      `json:"height"`
	Width    int      `json:"width"`
	Channels int      `json:"channels"`
	// CodeVersion is the version of the program that wrote the shards.
	CodeVersion string `json:"code_version"`
	// Sources lists what the split read: each input file, class folder or tar member
	// (datasets.Unit.Source) with the sha256 of the records read from it; SourceChecksum
	// summarises the records of all of them. Reproductions compare the sources of their
	// splits, so that no test image is also a training image.
	Sources        []Source `json:"sources,omitempty"`
	SourceChecksum string   `json:"source_checksum"`
	// Classes names the labels, in label order (Classes[label]); empty when the source has
	// no names for them. Evaluations compare it between splits, so that a class numbered
	// differently in two splits is refused instead of scored as a wrong answer.
	Classes []string `json:"classes,omitempty"`

	// Online marks base shards (`dcl preprocess --views=online`): one pass whose rows hold
	// each image once (View1, in Encoding, at the row's own Height×Width), from which the
	// reader makes the Views views of epoch e on the fly, seeded exactly as preprocessing
	// seeds pass e, so they are the views a run with Passes > e stores in pass e before
	// that pass encodes them (see TrainerViews). Height and Width are then the views' size,
	// not the rows'.
	Online bool `json:"online,omitempty"`
	// MaxSide, when positive, bounds the longer side of the images views are cut from:
	// larger images are first downscaled (antialiased, as Pillow) and, in base shards,
	// stored re-encoded. Both modes apply it, so their views agree. 0 keeps every image as
	// published.
	MaxSide int `json:"max_side,omitempty"`
	// GroupRows is the number of rows per row group (the last of a shard may be shorter),
	// fixed from the view geometry so that the passes of stored views and the base shards
	// of the same dataset are laid out alike and are read in the same order; 0 (datasets
	// of earlier versions) cuts row groups by bytes.
	GroupRows int `json:"group_rows,omitempty"`
}

// Source is one input file or folder of a run and its sha256 (hex).
type Source struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// Validate reports the first missing or impossible field.
func (c *Config) Validate() error {
	switch {
	case c.Dataset == "":
		return fmt.Errorf("config: dataset is missing")
	case c.Split == "":
		return fmt.Errorf("config: split is missing")
	case c.Preset == "":
		return fmt.Errorf("config: preset is missing")
	case len(c.Augment) == 0:
		return fmt.Errorf("config: augment (the augmentation config) is missing")
	case !json.Valid(c.Augment):
		return fmt.Errorf("config: augment is not valid JSON")
	case c.Passes < 1:
		return fmt.Errorf("config: passes = %d, want at least 1", c.Passes)
	case c.Parts < 1 || c.Parts > 99999:
		return fmt.Errorf("config: parts = %d, want 1 to 99999", c.Parts)
	case c.Views != 1 && c.Views != 2:
		return fmt.Errorf("config: views = %d, want 1 or 2", c.Views)
	case c.Height <= 0 || c.Width <= 0:
		return fmt.Errorf("config: image size %dx%d, both sides must be positive", c.Height, c.Width)
	case c.Channels != 1 && c.Channels != 3:
		return fmt.Errorf("config: channels = %d, want 1 or 3", c.Channels)
	case c.CodeVersion == "":
		return fmt.Errorf("config: code_version is missing")
	case c.SourceChecksum == "":
		return fmt.Errorf("config: source_checksum is missing")
	}
	switch {
	case c.Online && c.Passes != 1:
		return fmt.Errorf("config: base shards (online views) have one pass, not %d", c.Passes)
	case c.Online && c.Views != 2:
		return fmt.Errorf("config: base shards (online views) make view pairs, not %d view", c.Views)
	case c.MaxSide < 0:
		return fmt.Errorf("config: max_side = %d, want 0 (none) or more", c.MaxSide)
	case c.GroupRows < 0:
		return fmt.Errorf("config: group_rows = %d, want 0 (by bytes) or more", c.GroupRows)
	}
	if _, err := ParseEncoding(string(c.Encoding)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := CheckClasses(c.Classes); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// CheckClasses refuses a class list with an empty or repeated name.
func CheckClasses(classes []string) error {
	seen := make(map[string]int, len(classes))
	for i, c := range classes {
		if c == "" {
			return fmt.Errorf("class %d has no name", i)
		}
		if j, ok := seen[c]; ok {
			return fmt.Errorf("classes %d and %d are both named %q", j, i, c)
		}
		seen[c] = i
	}
	return nil
}

// canonical returns c as compact JSON with the augmentation config compacted too, so that
// two Configs that mean the same compare equal byte for byte.
func (c Config) canonical() ([]byte, error) {
	if len(c.Augment) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, c.Augment); err != nil {
			return nil, fmt.Errorf("config: augment is not valid JSON: %w", err)
		}
		c.Augment = buf.Bytes()
	}
	return json.Marshal(c)
}

// Diff lists the fields in which c and other differ ("seed: 1 != 2"); empty when they
// describe the same dataset. Sources are not compared: they say where the records were
// read, which only the manifest records (shard footers leave them out, so that the same
// records read from another place give the same shards); SourceChecksum compares the
// records themselves.
func (c Config) Diff(other Config) []string {
	c.Sources, other.Sources = nil, nil
	a, errA := c.canonical()
	b, errB := other.canonical()
	if errA != nil || errB != nil {
		return []string{"config: not comparable (invalid augment JSON)"}
	}
	if bytes.Equal(a, b) {
		return nil
	}
	var ma, mb map[string]json.RawMessage
	_ = json.Unmarshal(a, &ma)
	_ = json.Unmarshal(b, &mb)
	var diffs []string
	for _, k := range sortedKeys(ma, mb) {
		if !bytes.Equal(ma[k], mb[k]) {
			diffs = append(diffs, fmt.Sprintf("%s: %s != %s", k, shorten(ma[k]), shorten(mb[k])))
		}
	}
	return diffs
}

func sortedKeys(ms ...map[string]json.RawMessage) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func shorten(b json.RawMessage) string {
	if b == nil {
		return "(none)"
	}
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}

// Footer keys of the provenance every shard carries. ConfigKey holds the whole Config as
// JSON; the others repeat its most useful fields for people reading a footer with other tools.
const (
	FormatKey         = "dcl.format"
	ConfigKey         = "dcl.config"
	PassKey           = "dcl.pass"
	PartKey           = "dcl.part"
	DatasetKey        = "dcl.dataset"
	SplitKey          = "dcl.split"
	PresetKey         = "dcl.preset"
	SeedKey           = "dcl.seed"
	SourceChecksumKey = "dcl.source_checksum"
	CodeVersionKey    = "dcl.code_version"
	AugmentKey        = "dcl.augment"
)

// ShardID names one shard of a dataset: part Part of Parts in pass Pass.
type ShardID struct {
	Pass, Part, Parts int
}

// Path returns the shard's path relative to the dataset directory, slash-separated:
// pass-003/part-00012-of-00064.parquet. Passes get a folder each so a pass can be listed,
// copied or deleted alone; numbers are zero-padded so names sort in order.
func (id ShardID) Path() string {
	return path.Join(fmt.Sprintf("pass-%03d", id.Pass), fmt.Sprintf("part-%05d-of-%05d.parquet", id.Part, id.Parts))
}

func (id ShardID) validate(cfg *Config) error {
	switch {
	case id.Pass < 0 || id.Pass >= cfg.Passes:
		return fmt.Errorf("shard pass %d outside 0..%d", id.Pass, cfg.Passes-1)
	case id.Parts != cfg.Parts:
		return fmt.Errorf("shard says %d parts, the config %d", id.Parts, cfg.Parts)
	case id.Part < 0 || id.Part >= id.Parts:
		return fmt.Errorf("shard part %d outside 0..%d", id.Part, id.Parts-1)
	}
	return nil
}

var shardPathRE = regexp.MustCompile(`^pass-(\d{3,})/part-(\d{5})-of-(\d{5})\.parquet$`)

// ParseShardPath is the inverse of ShardID.Path.
func ParseShardPath(rel string) (ShardID, error) {
	m := shardPathRE.FindStringSubmatch(rel)
	if m == nil {
		return ShardID{}, fmt.Errorf("shard path %q: want pass-NNN/part-NNNNN-of-NNNNN.parquet", rel)
	}
	pass, _ := strconv.Atoi(m[1])
	part, _ := strconv.Atoi(m[2])
	parts, _ := strconv.Atoi(m[3])
	return ShardID{Pass: pass, Part: part, Parts: parts}, nil
}

// Place says where a preprocessing run should put a record: the part (shard) that holds it
// and a sort key for its place within the part. Writing each part's rows in increasing order
// makes row groups random samples of the dataset, whatever the order of the source
// (ImageNet's folders are sorted by class), which the shuffled reader relies on: it mixes
// whole row groups. Both are pure functions of (seed, key), the same in every pass: every
// pass of stored views and the base shards of the same dataset are then laid out alike, so
// the reader visits their rows in the same order and a run on either trains the same. The
// reader reshuffles row groups and rows every epoch; what a pass-independent place gives up
// is only that the rows of one row group always share a window.
func Place(seed uint64, key string, parts int) (part int, order uint64) {
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h = splitmix(h ^ splitmix(seed))
	return int(bounded(rand.NewPCG(h, 0), uint64(parts))), splitmix(h)
}

// SourcesChecksum summarises a run's input files in one string for Config.SourceChecksum:
// "sha256:" and the sha256 of the sorted "name<TAB>sha256" lines. The order the files were
// listed in does not matter.
func SourcesChecksum(sources []Source) string {
	lines := make([]string, len(sources))
	for i, s := range sources {
		lines[i] = s.Name + "\t" + s.SHA256 + "\n"
	}
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// decodeStd decodes a PNG or JPEG file (a stored view or base image) to the standard library's
// image: PNG with image/png, JPEG with internal/jpeg (image/jpeg made faster, same pixels).
func decodeStd(data []byte, e Encoding) (image.Image, error) {
	if e == PNG {
		return png.Decode(bytes.NewReader(data))
	}
	return jpegdec.Decode(bytes.NewReader(data))
}

// TrainerViews says what a trainer reading a dataset of this configuration trains on: views
// stored in Encoding and decoded, or views made on the fly, which are never encoded. Stored
// views in a lossy encoding (JPEG, the default above 96 px) are other pixels than the views
// made on the fly from the same images; lossless ones are the same.
func (c *Config) TrainerViews() string {
	switch {
	case c.Online:
		return "made on the fly, raw pixels"
	case c.Encoding == JPEG:
		return "stored as JPEG (quality 95), decoded"
	}
	return "stored " + string(c.Encoding) + " (lossless)"
}

// ModesDiffer reports whether the views of this configuration's stored passes (Encoding)
// and of its base shards are other pixels: the same flags give runs with other results in
// the two modes.
func (c *Config) ModesDiffer() bool { return c.Views == 2 && c.Encoding == JPEG }
