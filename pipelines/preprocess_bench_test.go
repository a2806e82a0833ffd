package pipelines

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/cputime"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"

	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// BenchmarkPreprocessCIFAR is the end-to-end figure: 50,000 CIFAR-10 images (a
// synthetic data_batch_1..5, 10,000 records each), one pass of simclr-cifar pairs, on
// prism in process; and the same work (read, hash, augment, encode, write the same shards,
// commit) done by a plain Go loop without Beam, with as many goroutines augmenting. The
// two write byte-identical datasets (checked). Under -short: 500 images.
func BenchmarkPreprocessCIFAR(b *testing.B) {
	perFile := 10000
	if testing.Short() {
		perFile = 100
	}
	in := b.TempDir()
	pipelinetest.WriteCIFAR10(b, in, perFile)
	opts := func(out string) PreprocessOptions {
		return PreprocessOptions{
			Spec:    datasets.Spec{Dataset: datasets.CIFAR10, Input: in, Split: "train"},
			Output:  out,
			Augment: preset(b, augment.SimCLRCIFAR, 32),
			Passes:  1, Seed: 1, CodeVersion: "bench",
		}
	}
	images := float64(5 * perFile)
	var beamSum, plainSum string
	measure := func(b *testing.B, run func(out string), sum *string) {
		var cpu time.Duration
		for b.Loop() {
			out := filepath.Join(b.TempDir(), "out")
			c := cputime.Process()
			run(out)
			cpu += cputime.Process() - c
			b.StopTimer()
			*sum = datasetChecksum(b, out)
			os.RemoveAll(out)
			b.StartTimer()
		}
		b.ReportMetric(images*float64(b.N)/b.Elapsed().Seconds(), "images/s")
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	}
	b.Run("prism", func(b *testing.B) {
		measure(b, func(out string) { mustPreprocess(b, opts(out)) }, &beamSum)
	})
	b.Run("plain-loop", func(b *testing.B) {
		measure(b, func(out string) {
			if err := plainPreprocess(context.Background(), opts(out)); err != nil {
				b.Fatal(err)
			}
		}, &plainSum)
	})
	if beamSum != "" && plainSum != "" && beamSum != plainSum {
		b.Errorf("the pipeline and the plain loop wrote different datasets")
	}
}

// datasetChecksum is a digest of every file of a dataset directory.
func datasetChecksum(b *testing.B, dir string) string {
	sums := testfiles.TreeChecksums(b, dir)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range sums {
			if !yield(k) {
				return
			}
		}
	})
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s %s\n", k, sums[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// plainPreprocess is the preprocessing of the pipeline written as a plain Go program: read
// every record into memory, hash the units, prepare the output, then for each pass and part
// place, sort, augment and encode (GOMAXPROCS goroutines) and write the shard, and commit.
// It holds the whole split in memory, which is fine for CIFAR and is what the pipeline's
// design avoids.
func plainPreprocess(ctx context.Context, o PreprocessOptions) error {
	job, err := PlanPreprocess(ctx, o)
	if err != nil {
		return err
	}
	cfg := job.Config
	var recs []datasets.Record
	stats := make([]unitStats, len(job.Plan.Units))
	for i, u := range job.Plan.Units {
		h := sha256.New()
		st, err := datasets.Read(ctx, u, func(r datasets.Record) error {
			recordDigest(h, &r)
			recs = append(recs, r)
			return nil
		}, func(datasets.BadRecord) error { return fmt.Errorf("bad record in a benchmark fixture") })
		if err != nil {
			return err
		}
		stats[i] = unitStats{Seq: i, Records: st.Records, Digest: hex.EncodeToString(h.Sum(nil))}
	}
	cfg.SourceChecksum = sourceChecksum(stats)
	sourceDigests(cfg.Sources, unitSources(job.Plan.Units, cfg.Sources), stats)
	if err := shards.Prepare(ctx, o.Output, cfg, o.Overwrite); err != nil {
		return err
	}
	workers := runtime.GOMAXPROCS(0)
	augs := make([]*augment.Augmenter, workers)
	for i := range augs {
		if augs[i], err = augment.New(o.Augment); err != nil {
			return err
		}
	}
	var infos []shards.ShardInfo
	for pass := range cfg.Passes {
		type placed struct {
			order uint64
			rec   *datasets.Record
		}
		parts := make([][]placed, cfg.Parts)
		for i := range recs {
			part, order := shards.Place(cfg.Seed, recs[i].Key, cfg.Parts)
			parts[part] = append(parts[part], placed{order, &recs[i]})
		}
		for part, list := range parts {
			slices.SortFunc(list, func(a, b placed) int {
				return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.rec.Index, b.rec.Index))
			})
			footer := cfg // as the pipeline's: the sources are the manifest's alone
			footer.Sources = nil
			w, err := shards.NewWriter(ctx, o.Output, shards.ShardID{Pass: pass, Part: part, Parts: cfg.Parts}, footer, shards.WriterOptions{})
			if err != nil {
				return err
			}
			rows := make([]shards.Row, len(list))
			errs := make([]error, workers)
			var wg sync.WaitGroup
			for g := range workers {
				wg.Go(func() {
					for i := g; i < len(list); i += workers {
						r := list[i].rec
						row := shards.Row{Key: r.Key, Index: r.Index, Label: int32(r.Label), Pass: int32(pass),
							Height: int32(cfg.Height), Width: int32(cfg.Width), Channels: int32(cfg.Channels), Encoding: string(cfg.Encoding)}
						for v := range cfg.Views {
							view, err := augs[g].View(r.Pixels, cfg.Seed, r.Key, pass, v)
							if err != nil {
								errs[g] = err
								return
							}
							enc, err := shards.EncodeView(view, cfg.Encoding)
							if err != nil {
								errs[g] = err
								return
							}
							if v == 0 {
								row.View1 = enc
							} else {
								row.View2 = enc
							}
						}
						rows[i] = row
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					w.Abort()
					return err
				}
			}
			for _, row := range rows {
				if err := w.Write(row); err != nil {
					w.Abort()
					return err
				}
			}
			info, err := w.Close()
			if err != nil {
				return err
			}
			infos = append(infos, info)
		}
	}
	_, err = shards.Commit(ctx, o.Output, cfg, infos, int64(len(recs)), shards.DeadLetters{})
	return err
}

// BenchmarkImageNetStages measures what the pipeline's design costs on ImageNet-sized
// JPEGs (500×375, about 110 KB): WriteParts reads each image file a second time (the
// references carry no pixels), next to the work it must do anyway: decode, two
// simclr-imagenet 224 px views, JPEG encoding. ReadUnits' own cost per image (read, header
// check, sha256, CRC) is measured too. Per image, on one goroutine.
func BenchmarkImageNetStages(b *testing.B) {
	n := 32
	if testing.Short() {
		n = 4
	}
	dir := b.TempDir()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, "n01440764", fmt.Sprintf("n01440764_%d.JPEG", i))
		testfiles.WriteFile(b, p, testfiles.PhotoJPEG(b, 500, 375, i))
		paths = append(paths, p)
	}
	var total int
	for _, p := range paths {
		st, _ := os.Stat(p)
		total += int(st.Size())
	}
	b.Logf("%d JPEGs of 500×375, %d bytes on average", n, total/n)
	unit := datasets.Unit{Kind: datasets.KindClassFolder, Split: "train", Path: dir, Dir: "n01440764", DirFiles: int64(n),
		Records: int64(n), Exact: true, MaxFileBytes: datasets.DefaultMaxFileBytes}
	ctx := context.Background()
	var recs []datasets.Record
	if _, err := datasets.Read(ctx, unit, func(r datasets.Record) error { recs = append(recs, r); return nil },
		func(datasets.BadRecord) error { return nil }); err != nil || len(recs) != n {
		b.Fatalf("reading the fixture: %v, %d records", err, len(recs))
	}
	perImage := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1e6, "ms/image")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("ReadUnits-read-check-hash", func(b *testing.B) {
		for b.Loop() {
			h := sha256.New()
			if _, err := datasets.Read(ctx, unit, func(r datasets.Record) error {
				recordDigest(h, &r)
				_ = recordCRC(&r)
				return nil
			}, func(datasets.BadRecord) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		perImage(b)
	})
	f := &writePartFn{Units: []datasets.Unit{unit}, fetcher: datasets.NewFetcher([]datasets.Unit{unit})}
	part := &partWriter{fn: f, ctx: ctx}
	b.Run("WriteParts-refetch", func(b *testing.B) {
		for b.Loop() {
			for _, r := range recs {
				if _, err := part.fetch([]ref{{Unit: 0, Index: r.Index, Ref: r.Ref, CRC: recordCRC(&r)}}); err != nil {
					b.Fatal(err)
				}
			}
		}
		perImage(b)
	})
	b.Run("WriteParts-decode", func(b *testing.B) {
		for b.Loop() {
			for _, r := range recs {
				if _, err := datasets.Decode(r.Encoded, "", datasets.Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		perImage(b)
	})
	aug, err := augment.New(preset(b, augment.SimCLRImageNet, 224))
	if err != nil {
		b.Fatal(err)
	}
	imgs := make([]source, n)
	for i, r := range recs {
		img, err := datasets.Decode(r.Encoded, "", datasets.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		imgs[i] = source{key: r.Key, img: img}
	}
	augJS, err := json.Marshal(aug.Config())
	if err != nil {
		b.Fatal(err)
	}
	cfg := shards.Config{Views: 2, Encoding: shards.JPEG, Height: 224, Width: 224, Channels: 3, Seed: 1, Augment: augJS}
	b.Run("WriteParts-two-views-jpeg", func(b *testing.B) {
		base, err := shards.NewBaseMaker(&cfg)
		if err != nil {
			b.Fatal(err)
		}
		m := &rowMaker{aug: aug, base: base}
		for b.Loop() {
			for _, s := range imgs {
				if _, err := m.row(&cfg, 0, s); err != nil {
					b.Fatal(err)
				}
			}
		}
		perImage(b)
	})
}
