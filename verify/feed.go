package verify

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // photographs
	_ "image/png"  // photographs
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
	"github.com/dcl-beam/dcl-beam/internal/cputime"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// FeedSpec is one feeding measurement: shards of Pairs view pairs of Size px in Encoding,
// read in batches of Batch pairs for Epochs epochs.
type FeedSpec struct {
	Name     string          `json:"name"`
	Size     int             `json:"size"`
	Channels int             `json:"channels"`
	Encoding shards.Encoding `json:"encoding"`
	Pairs    int             `json:"pairs"`
	Batch    int             `json:"batch"`
	Epochs   int             `json:"epochs"`
	// Against names the speed row whose images/s the reader must beat twice over (a reader
	// at the step's own rate stalls it whenever decoding hiccups): model/batch/precision.
	Against string `json:"against"`
	// Photos: the views are cut from real photographs (CheckConfig.Photos) when there are some.
	Photos bool `json:"photos,omitempty"`
	// Online: the shards are base shards (dcl preprocess --views=online), each source image
	// once, and the reader makes both views of every row as it reads: raw pixels for small
	// images, and for photographs a JPEG (quality 95) of each at its own size, as ImageNet's
	// published files are kept.
	Online bool `json:"online,omitempty"`
}

// FeedResult is the shard reader's throughput on this machine.
type FeedResult struct {
	FeedSpec
	// Source says where the images came from ("photographs", "fashion-mnist" or "random").
	Source string `json:"source"`
	// Cores is GOMAXPROCS: the reader decodes on all of them, as the trainer's does.
	Cores        int     `json:"cores"`
	WriteSeconds float64 `json:"write_seconds"`
	ReadSeconds  float64 `json:"read_seconds"`
	// Images counts views (two per pair) delivered in full batches.
	Images       int64   `json:"images"`
	ImagesPerSec float64 `json:"images_per_sec"`
	// ImagesPerCPUSecond divides the views by the CPU time the process spent reading them:
	// set beside one core's rate (BENCHMARKS.md), it says how the reader scales to Cores.
	ImagesPerCPUSecond float64 `json:"images_per_cpu_second,omitempty"`
	ShardBytes         int64   `json:"shard_bytes"`
	// StepImagesPerSec is the Against row's figure, one device's. Devices is how many the
	// reader feeds: the machine's GPUs, which dcl train --devices=all trains on, at least one.
	// DemandImagesPerSec is what they take together, StepImagesPerSec·Devices (data parallel,
	// each device runs the row's step on its share at the one-device rate at best), and Ratio
	// the reader's figure over it (≥ 2 is the goal: no device waits on data).
	StepImagesPerSec   float64 `json:"step_images_per_sec,omitempty"`
	Devices            int     `json:"devices,omitempty"`
	DemandImagesPerSec float64 `json:"demand_images_per_sec,omitempty"`
	Ratio              float64 `json:"ratio,omitempty"`
	Error              string  `json:"error,omitempty"`
}

// against sets the step the reader feeds: a row of stepImagesPerSec on one device, run on
// devices devices (fewer than one counts as one).
func (f *FeedResult) against(stepImagesPerSec float64, devices int) {
	f.Devices = max(devices, 1)
	f.StepImagesPerSec = stepImagesPerSec
	f.DemandImagesPerSec = stepImagesPerSec * float64(f.Devices)
	f.Ratio = f.ImagesPerSec / f.DemandImagesPerSec
}

// demand is the images/s the reader must feed as the report writes it: one device's figure,
// and on several the product that is the reader's target.
func (f FeedResult) demand() string {
	if f.StepImagesPerSec <= 0 {
		return "—"
	}
	if f.Devices <= 1 {
		return fmt.Sprintf("%.0f", f.StepImagesPerSec)
	}
	return fmt.Sprintf("%.0f × %d devices = %.0f", f.StepImagesPerSec, f.Devices, f.DemandImagesPerSec)
}

// feedDevices is how many devices the reader feeds: the GPUs the doctor found, at least one.
func feedDevices(doctor cuda.Report) int { return max(len(doctor.GPUs), 1) }

// sourceImages returns up to n source images: Fashion-MNIST's training images from dir, or
// random ones of size×size×channels when dir is "".
func sourceImages(dir string, n, size, channels int, seed uint64) ([]transforms.Image, []int32, string, error) {
	if dir == "" {
		r := rand.New(rand.NewPCG(seed, 7))
		imgs := make([]transforms.Image, n)
		labels := make([]int32, n)
		for i := range imgs {
			imgs[i] = transforms.NewImage(size, size, channels)
			for j := range imgs[i].Pix {
				imgs[i].Pix[j] = uint8(r.Uint32())
			}
			labels[i] = int32(i % 10)
		}
		return imgs, labels, "random", nil
	}
	pix, h, w, err := readIDXImages(filepath.Join(dir, "train-images-idx3-ubyte.gz"), n)
	if err != nil {
		return nil, nil, "", err
	}
	lab, err := readIDXLabels(filepath.Join(dir, "train-labels-idx1-ubyte.gz"), len(pix))
	if err != nil {
		return nil, nil, "", err
	}
	imgs := make([]transforms.Image, len(pix))
	for i, p := range pix {
		imgs[i] = transforms.Image{Pix: p, H: h, W: w, C: 1}
	}
	return imgs, lab, "fashion-mnist", nil
}

// readIDXImages reads the first n images of a gzipped IDX3 file (all of them when n is 0).
func readIDXImages(path string, n int) ([][]uint8, int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("reading %s: %w", path, err)
	}
	var hdr [4]uint32
	if err := binary.Read(z, binary.BigEndian, &hdr); err != nil {
		return nil, 0, 0, fmt.Errorf("reading the header of %s: %w", path, err)
	}
	if hdr[0] != 0x803 || hdr[2] == 0 || hdr[3] == 0 || hdr[2] > 4096 || hdr[3] > 4096 {
		return nil, 0, 0, fmt.Errorf("%s is not an IDX file of images (magic %#x, %dx%d)", path, hdr[0], hdr[2], hdr[3])
	}
	count := int(hdr[1])
	if n > 0 && n < count {
		count = n
	}
	h, w := int(hdr[2]), int(hdr[3])
	out := make([][]uint8, count)
	for i := range out {
		out[i] = make([]uint8, h*w)
		if _, err := io.ReadFull(z, out[i]); err != nil {
			return nil, 0, 0, fmt.Errorf("reading image %d of %s: %w", i, path, err)
		}
	}
	return out, h, w, nil
}

// readIDXLabels reads the first n labels of a gzipped IDX1 file.
func readIDXLabels(path string, n int) ([]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var hdr [2]uint32
	if err := binary.Read(z, binary.BigEndian, &hdr); err != nil {
		return nil, fmt.Errorf("reading the header of %s: %w", path, err)
	}
	if hdr[0] != 0x801 || int(hdr[1]) < n {
		return nil, fmt.Errorf("%s is not an IDX file of at least %d labels (magic %#x, %d labels)", path, n, hdr[0], hdr[1])
	}
	raw := make([]uint8, n)
	if _, err := io.ReadFull(z, raw); err != nil {
		return nil, fmt.Errorf("reading the labels of %s: %w", path, err)
	}
	out := make([]int32, n)
	for i, l := range raw {
		out[i] = int32(l)
	}
	return out, nil
}

// writeShards writes one pass of spec.Pairs SimCLR view pairs (simclr-cifar at 32 px,
// simclr-imagenet above) of the source images into dir, as `dcl preprocess` lays them out:
// several shards, bounded row groups, a manifest written last.
func writeShards(ctx context.Context, dir string, spec FeedSpec, src []transforms.Image, labels []int32) (int64, error) {
	preset := augment.SimCLRCIFAR
	if spec.Size > 64 {
		preset = augment.SimCLRImageNet
	}
	acfg, err := augment.Preset(preset, spec.Size)
	if err != nil {
		return 0, err
	}
	raw, err := json.Marshal(acfg)
	if err != nil {
		return 0, err
	}
	parts := max(1, min(runtime.GOMAXPROCS(0), 8))
	cfg := shards.Config{
		Dataset: "gpu-check", Split: "train", Preset: preset, Augment: raw, Seed: 1, Passes: 1, Parts: parts, Views: 2,
		Encoding: spec.Encoding, Height: spec.Size, Width: spec.Size, Channels: spec.Channels, Online: spec.Online,
		CodeVersion: "gpu-check", SourceChecksum: "sha256:00",
	}
	if err := shards.Prepare(ctx, dir, cfg, true); err != nil {
		return 0, err
	}
	infos := make([]shards.ShardInfo, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos[part], errs[part] = writePart(ctx, dir, cfg, acfg, part, spec, src, labels)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if _, err := shards.Commit(ctx, dir, cfg, infos, int64(spec.Pairs), shards.DeadLetters{}); err != nil {
		return 0, err
	}
	var bytes int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			bytes += fi.Size()
		}
		return nil
	})
	return bytes, nil
}

func writePart(ctx context.Context, dir string, cfg shards.Config, acfg augment.Config, part int, spec FeedSpec, src []transforms.Image, labels []int32) (shards.ShardInfo, error) {
	a, err := augment.New(acfg)
	if err != nil {
		return shards.ShardInfo{}, err
	}
	w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: 0, Part: part, Parts: cfg.Parts}, cfg, shards.WriterOptions{})
	if err != nil {
		return shards.ShardInfo{}, err
	}
	for i := part; i < spec.Pairs; i += cfg.Parts {
		img := src[i%len(src)]
		if img.C != spec.Channels {
			img = toChannels(img, spec.Channels)
		}
		key := fmt.Sprintf("gpu-check/%06d", i)
		if spec.Online {
			if err := writeBase(w, spec, key, int64(i), labels[i%len(labels)], img); err != nil {
				w.Abort()
				return shards.ShardInfo{}, err
			}
			continue
		}
		v1, err := a.View(img, cfg.Seed, key, 0, 0)
		if err == nil {
			var v2 transforms.Image
			if v2, err = a.View(img, cfg.Seed, key, 0, 1); err == nil {
				err = w.WriteViews(key, int64(i), labels[i%len(labels)], v1, v2)
			}
		}
		if err != nil {
			w.Abort()
			return shards.ShardInfo{}, err
		}
	}
	return w.Close()
}

// writeBase writes img as a base row: its pixels, or for JPEG shards its JPEG at its own size.
func writeBase(w *shards.Writer, spec FeedSpec, key string, index int64, label int32, img transforms.Image) error {
	data := img.Pix[:img.H*img.W*img.C]
	if spec.Encoding != shards.Raw {
		var err error
		if data, err = shards.EncodeView(img, spec.Encoding); err != nil {
			return err
		}
	}
	return w.Write(shards.Row{Key: key, Index: index, Label: label, View1: data,
		Height: int32(img.H), Width: int32(img.W), Channels: int32(img.C), Encoding: string(spec.Encoding)})
}

// toChannels turns a grayscale image into c channels (each a copy), for the RGB rows.
func toChannels(img transforms.Image, c int) transforms.Image {
	out := transforms.NewImage(img.H, img.W, c)
	for i, v := range img.Pix[:img.H*img.W] {
		for k := range c {
			out.Pix[i*c+k] = v
		}
	}
	return out
}

// readShards times the shard reader over the dataset: shuffled, decoded on every core,
// batched, as the trainer's ShardSource reads it.
func readShards(ctx context.Context, dir string, spec FeedSpec) (int64, time.Duration, error) {
	var images int64
	start := time.Now()
	for epoch := range max(spec.Epochs, 1) {
		r, err := shards.NewReader(ctx, dir, shards.ReaderOptions{BatchSize: spec.Batch, Seed: 1, Epoch: epoch})
		if err != nil {
			return 0, 0, err
		}
		for {
			b, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.Close()
				return 0, 0, err
			}
			images += int64(2 * b.Len)
			r.Release(b)
		}
		if err := r.Close(); err != nil {
			return 0, 0, err
		}
	}
	return images, time.Since(start), nil
}

func runFeed(ctx context.Context, work, data, photos string, spec FeedSpec) FeedResult {
	res := FeedResult{FeedSpec: spec, Cores: runtime.GOMAXPROCS(0)}
	var src []transforms.Image
	var labels []int32
	var source string
	var err error
	if spec.Photos && photos != "" {
		src, labels, source, err = photoImages(photos)
	} else {
		src, labels, source, err = sourceImages(data, min(spec.Pairs, 60000), 28, spec.Channels, 1)
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if source == "random" {
		// Random sources at the target size: no resampling from 28 px.
		src, labels, _, _ = sourceImages("", min(spec.Pairs, 4096), spec.Size, spec.Channels, 1)
	}
	res.Source = source
	dir := filepath.Join(work, "shards-"+spec.Name)
	start := time.Now()
	if res.ShardBytes, err = writeShards(ctx, dir, spec, src, labels); err != nil {
		res.Error = fmt.Sprintf("writing shards: %v", err)
		return res
	}
	res.WriteSeconds = time.Since(start).Seconds()
	cpu0 := cputime.Process()
	n, d, err := readShards(ctx, dir, spec)
	if err != nil {
		res.Error = fmt.Sprintf("reading shards: %v", err)
		return res
	}
	res.Images, res.ReadSeconds = n, d.Seconds()
	if d > 0 {
		res.ImagesPerSec = float64(n) / d.Seconds()
	}
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		res.ImagesPerCPUSecond = float64(n) / cpu.Seconds()
	}
	_ = os.RemoveAll(dir)
	return res
}

// photoImages reads every PNG and JPEG photograph in dir (scripts/photos.sh), as RGB.
func photoImages(dir string) ([]transforms.Image, []int32, string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, "", err
	}
	var imgs []transforms.Image
	var labels []int32
	for _, e := range entries {
		if ext := strings.ToLower(filepath.Ext(e.Name())); ext != ".png" && ext != ".jpg" && ext != ".jpeg" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, "", err
		}
		img, _, err := image.Decode(f)
		f.Close()
		if err != nil {
			return nil, nil, "", fmt.Errorf("decoding %s: %w", path, err)
		}
		m := transforms.FromStd(img)
		if m.C != 3 {
			m = toChannels(m, 3)
		}
		imgs = append(imgs, m)
		labels = append(labels, int32(len(labels)))
	}
	if len(imgs) == 0 {
		return nil, nil, "", fmt.Errorf("no PNG or JPEG photographs in %s", dir)
	}
	return imgs, labels, fmt.Sprintf("photographs (%d)", len(imgs)), nil
}
