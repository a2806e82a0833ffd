package shards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/cputime"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// benchKind is one of the two shapes the design cares about: CIFAR-sized raw pairs and
// ImageNet-sized JPEG pairs.
type benchKind struct {
	name      string
	size      int
	enc       Encoding
	rows      int // per shard, full size
	shortRows int // under -short
}

var benchKinds = []benchKind{
	{"raw32-pairs", 32, Raw, 20000, 500},
	{"jpeg224-pairs", 224, JPEG, 1000, 30},
}

func (k benchKind) n() int {
	if testing.Short() {
		return k.shortRows
	}
	return k.rows
}

func (k benchKind) config() Config {
	return Config{
		Dataset: "bench", Split: "train", Preset: "bench", Augment: json.RawMessage(`{}`),
		Passes: 1, Parts: 1, Views: 2, Encoding: k.enc, Height: k.size, Width: k.size, Channels: 3,
		CodeVersion: "bench", SourceChecksum: "none",
	}
}

// naturalish is an image with smooth structure and some texture, so JPEG sizes are near
// those of photographs (a 224 px view at quality 95 is about 40-60 KB) rather than of noise.
func naturalish(size int, seed uint64) transforms.Image {
	img := transforms.NewImage(size, size, 3)
	r := rand.New(rand.NewPCG(seed, 1))
	fx, fy := 4+r.Float64()*8, 5+r.Float64()*9
	for y := range size {
		for x := range size {
			for c := range 3 {
				v := 128 + 60*math.Sin(float64(x)/fx+float64(c))*math.Cos(float64(y)/fy) + r.NormFloat64()*12
				img.Pix[(y*size+x)*3+c] = uint8(max(0, min(255, v)))
			}
		}
	}
	return img
}

// benchRows returns n rows built from 16 distinct encoded view pairs, so the input's memory
// stays small whatever n is.
func benchRows(k benchKind, n int) []Row {
	var pool [][2][]byte
	for i := range 16 {
		a, _ := EncodeView(naturalish(k.size, uint64(2*i)), k.enc)
		b, _ := EncodeView(naturalish(k.size, uint64(2*i+1)), k.enc)
		pool = append(pool, [2][]byte{a, b})
	}
	rows := make([]Row, n)
	for i := range rows {
		p := pool[i%len(pool)]
		rows[i] = Row{Key: fmt.Sprintf("bench/%07d", i), Index: int64(i), Label: int32(i % 10), View1: p[0], View2: p[1],
			Height: int32(k.size), Width: int32(k.size), Channels: 3, Encoding: string(k.enc)}
	}
	return rows
}

func rowBytes(rows []Row) int64 {
	var n int64
	for _, r := range rows {
		n += int64(len(r.View1) + len(r.View2))
	}
	return n
}

func writeBenchShard(b *testing.B, dir string, k benchKind, rows []Row) ShardInfo {
	w, err := NewWriter(context.Background(), dir, ShardID{Pass: 0, Part: 0, Parts: 1}, k.config(), WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	info, err := w.Close()
	if err != nil {
		b.Fatal(err)
	}
	return info
}

// BenchmarkWriter: rows/s and MB/s (view bytes) of writing one shard of encoded view pairs
// to a local file, checksum included.
func BenchmarkWriter(b *testing.B) {
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			rows := benchRows(k, k.n())
			dir := b.TempDir()
			b.ResetTimer()
			cpu0 := cputime.Process()
			for range b.N {
				writeBenchShard(b, dir, k, rows)
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/1e3/float64(b.N*len(rows)), "cpu-µs/row")
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*len(rows))/sec, "rows/s")
			b.ReportMetric(float64(int64(b.N)*rowBytes(rows))/sec/1e6, "MB/s")
		})
	}
}

// BenchmarkReader: rows/s and MB/s (encoded view bytes) of one shuffled epoch, views decoded
// into batches (raw: copied; JPEG: decoded, on GOMAXPROCS decoders).
func BenchmarkReader(b *testing.B) {
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			rows := benchRows(k, k.n())
			dir := b.TempDir()
			info := writeBenchShard(b, dir, k, rows)
			if _, err := Commit(context.Background(), dir, k.config(), []ShardInfo{info}, int64(len(rows)), DeadLetters{}); err != nil {
				b.Fatal(err)
			}
			batch := 256
			if k.enc == JPEG {
				batch = 32
			}
			b.ResetTimer()
			cpu0 := cputime.Process()
			for i := range b.N {
				r, err := NewReader(context.Background(), dir, ReaderOptions{BatchSize: batch, Seed: 1, Epoch: i, KeepPartial: true})
				if err != nil {
					b.Fatal(err)
				}
				for {
					bt, err := r.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					r.Release(bt)
				}
				r.Close()
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/1e3/float64(b.N*len(rows)), "cpu-µs/row")
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*len(rows))/sec, "rows/s")
			b.ReportMetric(float64(int64(b.N)*rowBytes(rows))/sec/1e6, "MB/s")
		})
	}
}

// BenchmarkWriterPeakHeap writes one large shard of 224 px JPEG pairs and reports the peak
// live heap (sampled after a GC every 50 rows) while writing next to the shard's size: bounded row groups keep the first flat
// as the second grows.
func BenchmarkWriterPeakHeap(b *testing.B) {
	k := benchKinds[1]
	for _, n := range []int{500, 4000} {
		if testing.Short() {
			n /= 20
		}
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			rows := benchRows(k, 16)
			dir := b.TempDir()
			var peak, base uint64
			var ms runtime.MemStats
			for range b.N {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				base = ms.HeapAlloc
				w, err := NewWriter(context.Background(), dir, ShardID{Pass: 0, Part: 0, Parts: 1}, k.config(), WriterOptions{})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					r := rows[i%len(rows)]
					r.Key, r.Index = fmt.Sprintf("bench/%07d", i), int64(i)
					if err := w.Write(r); err != nil {
						b.Fatal(err)
					}
					if i%50 == 0 { // live heap: collect first, or garbage counts too
						runtime.GC()
						runtime.ReadMemStats(&ms)
						peak = max(peak, ms.HeapAlloc-min(base, ms.HeapAlloc))
					}
				}
				info, err := w.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(info.Bytes)/(1<<20), "shard-MiB")
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// BenchmarkReaderPeakHeap reads one shuffled epoch of datasets of two sizes (raw 32 px pairs)
// and reports the peak live heap (sampled after a GC every 8 batches): it depends on the window and the batch, not on the
// dataset's size.
func BenchmarkReaderPeakHeap(b *testing.B) {
	k := benchKinds[0]
	for _, n := range []int{20000, 80000} {
		if testing.Short() {
			n /= 50
		}
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			rows := benchRows(k, n)
			info := writeBenchShard(b, dir, k, rows)
			if _, err := Commit(context.Background(), dir, k.config(), []ShardInfo{info}, int64(n), DeadLetters{}); err != nil {
				b.Fatal(err)
			}
			rows = nil
			var peak uint64
			var ms runtime.MemStats
			b.ResetTimer()
			for i := range b.N {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				base := ms.HeapAlloc
				// Windows of 4 row groups (about 18 MiB): both datasets span many windows.
				r, err := NewReader(context.Background(), dir, ReaderOptions{BatchSize: 256, Seed: 1, Epoch: i, Window: 4})
				if err != nil {
					b.Fatal(err)
				}
				for j := 0; ; j++ {
					bt, err := r.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if j%8 == 0 { // live heap: collect first, or garbage counts too
						runtime.GC()
						runtime.ReadMemStats(&ms)
						peak = max(peak, ms.HeapAlloc-min(base, ms.HeapAlloc))
					}
					r.Release(bt)
				}
				r.Close()
				b.ReportMetric(float64(info.Bytes)/(1<<20), "dataset-MiB")
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// onlineKind is a dataset of base shards for BenchmarkReaderViews: what the reader decodes
// and cuts two views from, against reading the same views stored (the stored benchKind).
type onlineKind struct {
	name       string
	preset     string
	size       int // view side
	rows       int
	shortRows  int
	batch      int
	stored     benchKind
	makeImages func(b *testing.B) []Row // 16 distinct base rows
}

func (k onlineKind) config(b *testing.B, enc Encoding) Config {
	aug, err := augment.Preset(k.preset, k.size)
	if err != nil {
		b.Fatal(err)
	}
	js, err := json.Marshal(aug)
	if err != nil {
		b.Fatal(err)
	}
	return Config{
		Dataset: "bench", Split: "train", Preset: k.preset, Augment: js, Passes: 1, Parts: 1, Views: 2, Encoding: enc,
		Height: k.size, Width: k.size, Channels: 3, Online: true, GroupRows: 1 << 20, CodeVersion: "bench", SourceChecksum: "none",
	}
}

var onlineKinds = []onlineKind{
	{name: "cifar32-raw", preset: augment.SimCLRCIFAR, size: 32, rows: 20000, shortRows: 500, batch: 256, stored: benchKinds[0],
		makeImages: func(b *testing.B) []Row {
			var rows []Row
			for i := range 16 {
				img := naturalish(32, uint64(i))
				rows = append(rows, Row{View1: img.Pix, Height: 32, Width: 32, Channels: 3, Encoding: string(Raw)})
			}
			return rows
		}},
	// ILSVRC-2012's typical image: 500×375, about 110 KB as JPEG (testfiles.PhotoJPEG).
	{name: "imagenet224-jpeg", preset: augment.SimCLRImageNet, size: 224, rows: 400, shortRows: 8, batch: 32, stored: benchKinds[1],
		makeImages: func(b *testing.B) []Row {
			var rows []Row
			for i := range 16 {
				rows = append(rows, Row{View1: testfiles.PhotoJPEG(b, 500, 375, i), Height: 375, Width: 500, Channels: 3, Encoding: string(JPEG)})
			}
			return rows
		}},
	// The same images shrunk to a longer side of 341 (--max-side=341, short side 256) and
	// stored as JPEG at quality 95: FFCV's max_resolution lever.
	{name: "imagenet224-jpeg-max341", preset: augment.SimCLRImageNet, size: 224, rows: 400, shortRows: 8, batch: 32, stored: benchKinds[1],
		makeImages: func(b *testing.B) []Row {
			aug, _ := augment.Preset(augment.None, 224)
			js, _ := json.Marshal(aug)
			cfg := Config{Encoding: JPEG, MaxSide: 341, Augment: js}
			m, err := NewBaseMaker(&cfg)
			if err != nil {
				b.Fatal(err)
			}
			var rows []Row
			for i := range 16 {
				img, err := DecodeBase(testfiles.PhotoJPEG(b, 500, 375, i), JPEG, 375, 500, 3, &transforms.Image{}, &transforms.Image{})
				if err != nil {
					b.Fatal(err)
				}
				small, _, err := m.Shrink(img)
				if err != nil {
					b.Fatal(err)
				}
				enc, data, err := m.Encode(small, true)
				if err != nil {
					b.Fatal(err)
				}
				rows = append(rows, Row{View1: data, Height: int32(small.H), Width: int32(small.W), Channels: 3, Encoding: string(enc)})
			}
			return rows
		}},
	// The same images stored decoded (--encoding=raw: 563 KB each): what the views cost alone.
	{name: "imagenet224-raw", preset: augment.SimCLRImageNet, size: 224, rows: 400, shortRows: 8, batch: 32, stored: benchKinds[1],
		makeImages: func(b *testing.B) []Row {
			var rows []Row
			for i := range 16 {
				img, err := DecodeBase(testfiles.PhotoJPEG(b, 500, 375, i), JPEG, 375, 500, 3, &transforms.Image{}, &transforms.Image{})
				if err != nil {
					b.Fatal(err)
				}
				rows = append(rows, Row{View1: bytes.Clone(img.Pix), Height: 375, Width: 500, Channels: 3, Encoding: string(Raw)})
			}
			return rows
		}},
}

// readEpochs reads b.N shuffled epochs of the dataset in dir and reports view pairs per
// wall second and per CPU-second of the process (with -cpu 1: what one core delivers).
func readEpochs(b *testing.B, dir string, rows, batch int) {
	b.ResetTimer()
	cpu0 := cputime.Process()
	for i := range b.N {
		r, err := NewReader(context.Background(), dir, ReaderOptions{BatchSize: batch, Seed: 1, Epoch: i, KeepPartial: true})
		if err != nil {
			b.Fatal(err)
		}
		for {
			bt, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			r.Release(bt)
		}
		r.Close()
	}
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "pairs/s")
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N*rows)/cpu.Seconds(), "pairs/cpu-s")
	}
}

// BenchmarkReaderViews: the trainer's reader delivering view pairs, side by side: "stored"
// reads pairs preprocess stored (raw 32 px; 224 px JPEG), "online" reads base shards and
// makes both views of every row as it reads (simclr-cifar 32 px from 32×32 raw images;
// simclr-imagenet 224 px from 500×375 photo-like JPEGs, or from the same pixels stored raw).
// Run it with -cpu 1 for one core's rate.
func BenchmarkReaderViews(b *testing.B) {
	for _, k := range onlineKinds {
		b.Run("stored/"+k.stored.name+"/for-"+k.name, func(b *testing.B) {
			n := k.rows
			if testing.Short() {
				n = k.shortRows
			}
			rows := benchRows(k.stored, n)
			dir := b.TempDir()
			info := writeBenchShard(b, dir, k.stored, rows)
			if _, err := Commit(context.Background(), dir, k.stored.config(), []ShardInfo{info}, int64(n), DeadLetters{}); err != nil {
				b.Fatal(err)
			}
			readEpochs(b, dir, n, k.batch)
		})
		b.Run("online/"+k.name, func(b *testing.B) {
			n := k.rows
			if testing.Short() {
				n = k.shortRows
			}
			pool := k.makeImages(b)
			cfg := k.config(b, Encoding(pool[0].Encoding))
			dir := b.TempDir()
			w, err := NewWriter(context.Background(), dir, ShardID{Pass: 0, Part: 0, Parts: 1}, cfg, WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				r := pool[i%len(pool)]
				r.Key, r.Index, r.Label = fmt.Sprintf("bench/%07d", i), int64(i), int32(i%10)
				if err := w.Write(r); err != nil {
					b.Fatal(err)
				}
			}
			info, err := w.Close()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Commit(context.Background(), dir, cfg, []ShardInfo{info}, int64(n), DeadLetters{}); err != nil {
				b.Fatal(err)
			}
			readEpochs(b, dir, n, k.batch)
		})
	}
}
