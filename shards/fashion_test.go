package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
)

// fashionMNISTTest reads the Fashion-MNIST test split: 10,000 28×28 grayscale images and
// their labels.
func fashionMNISTTest(t testing.TB) (images [][]byte, labels []byte) {
	data := fashionmnist.Load(t, "test", 0)
	for i := range data.N {
		images = append(images, data.Image(i))
	}
	return images, data.Labels
}

// Fashion-MNIST's test split as an evaluation dataset (one raw view per image): the label
// histogram is the known 1,000 per class, and every pixel reads back unchanged.
func TestFashionMNISTEvaluationShards(t *testing.T) {
	images, labels := fashionMNISTTest(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{
		Dataset: "fashion-mnist", Split: "test", Preset: "none", Augment: json.RawMessage(`{"preset":"none"}`),
		Passes: 1, Parts: 4, Views: 1, Encoding: Raw, Height: 28, Width: 28, Channels: 1,
		CodeVersion: "test", SourceChecksum: "t10k",
	}
	if err := Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []ShardInfo
	for part := range cfg.Parts {
		w, err := NewWriter(ctx, dir, ShardID{Pass: 0, Part: part, Parts: cfg.Parts}, cfg, WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := part * len(images) / cfg.Parts; i < (part+1)*len(images)/cfg.Parts; i++ {
			r := Row{Key: fmt.Sprintf("fashion-mnist/test/%05d", i), Index: int64(i), Label: int32(labels[i]),
				View1: images[i], Height: 28, Width: 28, Channels: 1, Encoding: string(Raw)}
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	if _, err := Commit(ctx, dir, cfg, infos, int64(len(images)), DeadLetters{}); err != nil {
		t.Fatal(err)
	}
	sum, err := Verify(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rows != 10000 || sum.Views != 10000 || len(sum.Labels) != 10 {
		t.Fatalf("summary %+v", sum)
	}
	for l, n := range sum.Labels {
		if n != 1000 {
			t.Errorf("label %d: %d images, Fashion-MNIST's test split has 1000 per class", l, n)
		}
	}
	r, err := NewSequentialReader(ctx, dir, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next := 0
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.Len {
			if b.Indices[i] != int64(next) || string(b.Image(1, i).Pix) != string(images[next]) || b.Labels[i] != int32(labels[next]) {
				t.Fatalf("row %d does not read back as image %d", next, next)
			}
			next++
		}
	}
	if next != 10000 {
		t.Errorf("read %d images, want 10000", next)
	}
}
