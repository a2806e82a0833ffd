package main

import (
	"context"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// writeTinyDataset writes 6 view pairs of 16×16 RGB images in 2 shards of one pass.
func writeTinyDataset(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	cfg := shards.Config{
		Dataset: "tiny", Split: "train", Preset: "simclr-cifar", Augment: json.RawMessage(`{}`),
		Seed: 1, Passes: 1, Parts: 2, Views: 2, Encoding: shards.PNG, Height: 16, Width: 16, Channels: 3,
		CodeVersion: "test", SourceChecksum: "sha256:00",
	}
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []shards.ShardInfo
	for part := range 2 {
		w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: 0, Part: part, Parts: 2}, cfg, shards.WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := part; i < 6; i += 2 {
			v1, v2 := transforms.NewImage(16, 16, 3), transforms.NewImage(16, 16, 3)
			for p := range v1.Pix {
				v1.Pix[p], v2.Pix[p] = uint8(p*i), uint8(255-p*i)
			}
			if err := w.WriteViews("tiny/"+string(rune('a'+i)), int64(i), int32(i%3), v1, v2); err != nil {
				t.Fatal(err)
			}
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	if _, err := shards.Commit(ctx, dir, cfg, infos, 6, shards.DeadLetters{}); err != nil {
		t.Fatal(err)
	}
}

func TestShardsVerify(t *testing.T) {
	dir := t.TempDir()
	writeTinyDataset(t, dir)
	code, out, stderr := runDCL("shards", "verify", dir)
	want := `{"shards":2,"rows":6,"views":12,"labels":{"0":2,"1":2,"2":2},"ok":true}` + "\n"
	if code != exitOK || out != want {
		t.Fatalf("dcl shards verify = %d, %q, %q; want 0, %q", code, out, stderr, want)
	}

	os.WriteFile(filepath.Join(dir, "pass-000", "part-00001-of-00002.parquet"), []byte("not parquet"), 0o644)
	code, out, stderr = runDCL("shards", "verify", dir)
	var sum shards.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("verify printed %q: %v", out, err)
	}
	if code != exitError || sum.OK || len(sum.Problems) == 0 || !strings.Contains(stderr, "part-00001-of-00002.parquet") {
		t.Errorf("verify of a damaged dataset = %d, %q, %q; want exit 1 naming the shard", code, out, stderr)
	}

	empty := t.TempDir()
	code, out, stderr = runDCL("shards", "verify", empty)
	if code != exitError || !strings.Contains(out, `"ok":false`) || !strings.Contains(stderr, "no manifest.json") {
		t.Errorf("verify of a directory without a manifest = %d, %q, %q", code, out, stderr)
	}
}

func TestShardsInspect(t *testing.T) {
	dir, pngs := t.TempDir(), t.TempDir()
	writeTinyDataset(t, dir)
	code, out, stderr := runDCL("shards", "inspect", dir, "--rows=4", "--png="+pngs, "--scale=2")
	if code != exitOK {
		t.Fatalf("dcl shards inspect = %d, %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("inspect printed %d lines, want 4:\n%s", len(lines), out)
	}
	var first shards.InspectedRow
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.Key != "tiny/a" || first.Label != 0 || filepath.Base(first.PNG) != "0000-pass000-label0-tiny_a.png" {
		t.Errorf("first row %+v", first)
	}
	img := decodePNGFile(t, first.PNG)
	// Two 16-px views enlarged twice, side by side with a 4-px gap.
	if b := img.Bounds(); b.Dx() != 2*32+4 || b.Dy() != 32 {
		t.Errorf("PNG is %dx%d, want 68x32", b.Dx(), b.Dy())
	}
	entries, _ := os.ReadDir(pngs)
	if len(entries) != 4 {
		t.Errorf("%d PNG files, want 4", len(entries))
	}
}

func TestShardsCommandLine(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"shards"}, "want 'verify DIR' or 'inspect DIR'"},
		{[]string{"shards", "check", "x"}, `unknown shards subcommand "check"`},
		{[]string{"shards", "inspect", "x", "--rows=0"}, "--rows=0"},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.give...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl %q = %d, %q; want 2 and %q", tt.give, code, stderr, tt.want)
		}
	}
}

// With the storage endpoint refusing connections, `dcl shards verify gs://…` fails within
// the storage wait (the flag's, or the environment's), its last line the error naming the
// endpoint and the cause, the lines before it retries. A malformed wait is a usage error.
func TestShardsVerifyFailsFastWhenStorageIsUnreachable(t *testing.T) {
	root, endpoint := gcstest.Unreachable(t, "offline")
	tests := []struct {
		name string
		env  string
		args []string
		code int
		want string
	}{
		{"flag", "", []string{"--storage-timeout=2s"}, exitError, endpoint},
		{"environment", "2s", nil, exitError, endpoint},
		{"bad environment", "soon", nil, exitUsage, storage.WaitEnv + `="soon"`},
		{"bad flag", "", []string{"--storage-timeout=-1s"}, exitUsage, "--storage-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(storage.WaitEnv, tt.env)
			defer storage.SetWait(storage.DefaultWait)
			start := time.Now()
			code, _, stderr := runDCL(append([]string{"shards", "verify", root + "/data"}, tt.args...)...)
			took := time.Since(start)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1]
			if code != tt.code || !strings.Contains(last, tt.want) {
				t.Fatalf("exit %d, last line %q; want exit %d and a line naming %q\n%s", code, last, tt.code, tt.want, stderr)
			}
			if tt.code != exitError {
				return
			}
			if took > 8*time.Second {
				t.Errorf("took %s to fail with a wait of 2s", took)
			}
			if !strings.HasPrefix(last, "dcl shards: ") || !strings.Contains(last, "connection refused") {
				t.Errorf("last line %q: want the command's one-line error with the cause", last)
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.Contains(l, "storage: retrying") {
					t.Errorf("a line that is neither a retry nor the error: %q", l)
				}
			}
			if len(lines) < 2 {
				t.Errorf("no retry line before the error:\n%s", stderr)
			}
		})
	}
}

// decodePNGFile decodes the PNG file at path, failing the test if it is not one.
func decodePNGFile(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}
