package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// testConfig is a small dataset's configuration: 8×8 RGB view pairs, raw.
func testConfig() Config {
	return Config{
		Dataset: "synthetic", Split: "train", Preset: "simclr-cifar",
		Augment: json.RawMessage(`{"crop": {"size": 8, "scale": [0.08, 1]}, "flip": 0.5}`),
		Seed:    7, Passes: 2, Parts: 3, Views: 2, Encoding: Raw,
		Height: 8, Width: 8, Channels: 3, CodeVersion: "test",
		SourceChecksum: "sha256:0000", Sources: []Source{{Name: "data.bin", SHA256: "00"}},
	}
}

// testImage is a deterministic image that depends on (index, pass, view), so a test can
// tell rows and views apart after a round trip.
func testImage(h, w, c int, index int64, pass, view int) transforms.Image {
	img := transforms.NewImage(h, w, c)
	r := rand.New(rand.NewPCG(uint64(index), uint64(pass*2+view)))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.Uint32())
	}
	return img
}

func testKey(index int64) string { return fmt.Sprintf("synthetic/train/%06d", index) }

// testLabel is the label of source record index: 5 classes and some unlabelled rows.
func testLabel(index int64) int32 {
	if index%7 == 6 {
		return Unlabelled
	}
	return int32(index % 5)
}

// writeDataset writes a complete dataset of n records per pass, spread round-robin over the
// parts, with the given writer options, and commits it.
func writeDataset(t testing.TB, dir string, cfg Config, n int, opts WriterOptions) *Manifest {
	t.Helper()
	ctx := context.Background()
	if err := Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	var infos []ShardInfo
	for pass := range cfg.Passes {
		for part := range cfg.Parts {
			w, err := NewWriter(ctx, dir, ShardID{Pass: pass, Part: part, Parts: cfg.Parts}, cfg, opts)
			if err != nil {
				t.Fatalf("NewWriter: %v", err)
			}
			for i := int64(part); i < int64(n); i += int64(cfg.Parts) {
				v1 := testImage(cfg.Height, cfg.Width, cfg.Channels, i, pass, 1)
				var v2 transforms.Image
				if cfg.Views == 2 {
					v2 = testImage(cfg.Height, cfg.Width, cfg.Channels, i, pass, 2)
				}
				if err := w.WriteViews(testKey(i), i, testLabel(i), v1, v2); err != nil {
					t.Fatalf("WriteViews: %v", err)
				}
			}
			info, err := w.Close()
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			infos = append(infos, info)
		}
	}
	m, err := Commit(ctx, dir, cfg, infos, int64(n), DeadLetters{})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return m
}
