package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis/figures"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// writeClusterEmbeddings writes one embeddings .parquet file of perClass rows for each of
// classes, in well-separated Gaussian clusters, with the class list in its footer (none when
// classes is nil: then three unnamed labels); label -1 rows are added when unlabelled > 0.
func writeClusterEmbeddings(t *testing.T, path string, classes []string, perClass, unlabelled int) {
	t.Helper()
	meta := map[string]string{}
	k := 3
	if classes != nil {
		meta[embeddings.ClassesKey] = embeddings.ClassesMeta(classes)
		k = len(classes)
	}
	const dim = 16
	w, err := embeddings.NewWriter(context.Background(), path, dim, meta)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	id := int64(0)
	write := func(label int32, centre float64) {
		vec := make([]float32, dim)
		for d := range vec {
			vec[d] = float32(r.NormFloat64())
		}
		if label >= 0 {
			vec[label] += float32(centre)
		}
		if err := w.Write(id, label, vec); err != nil {
			t.Fatal(err)
		}
		id++
	}
	for i := range perClass * k {
		write(int32(i%k), 12)
	}
	for range unlabelled {
		write(-1, 0)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// dcl tsne lays out each set in a panel of the asked size, side by side, and says what it
// sampled; the legend's class names come from the embeddings.
func TestTSNECommand(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet")
	classes := []string{"T-shirt", "Trouser", "Pullover"}
	writeClusterEmbeddings(t, a, classes, 40, 5)
	writeClusterEmbeddings(t, b, classes, 30, 0)
	tests := []struct {
		name       string
		args       []string
		wantW      int
		wantH      int
		wantPanels []string
		wantPoints int
		wantOther  int64
	}{
		{name: "one run", args: []string{"--input", a, "--per-class", "20"}, wantW: 640, wantH: 520, wantPanels: []string{a}, wantPoints: 60},
		{name: "the first two classes", args: []string{"--input", a, "--classes", "2"}, wantW: 640, wantH: 520, wantPanels: []string{a}, wantPoints: 80, wantOther: 40},
		{name: "two runs, comma lists", args: []string{"--input", a + "," + b, "--label", "SimCLR (InfoNCE),DCL", "--width", "300", "--height", "250"},
			wantW: 600, wantH: 250, wantPanels: []string{"SimCLR (InfoNCE)", "DCL"}},
		{name: "two runs, repeated flags, one column", args: []string{"--input", a, "--input", b, "--label", "x, y", "--label", "z", "--cols", "1", "--width", "300", "--height", "250"},
			wantW: 300, wantH: 500, wantPanels: []string{"x, y", "z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "tsne.png")
			code, stdout, stderr := runDCL(append([]string{"tsne", "--output", out, "--iterations", "300"}, tt.args...)...)
			if code != exitOK {
				t.Fatalf("dcl tsne = %d\n%s\n%s", code, stdout, stderr)
			}
			var res figures.TSNEResult
			if err := json.Unmarshal([]byte(stdout), &res); err != nil {
				t.Fatalf("dcl tsne printed %q: %v", stdout, err)
			}
			if strings.Join(res.Classes, ",") != strings.Join(classes, ",") || len(res.Panels) != len(tt.wantPanels) {
				t.Fatalf("dcl tsne printed %s, want the class list and %d panels", stdout, len(tt.wantPanels))
			}
			for i, p := range res.Panels {
				if p.Label != tt.wantPanels[i] {
					t.Errorf("panel %d is titled %q, want %q", i, p.Label, tt.wantPanels[i])
				}
				if p.Embeddings == a && (p.Unlabelled != 5 || p.Rows != 125) {
					t.Errorf("panel %d: %+v, want 5 unlabelled rows of 125", i, p)
				}
			}
			if tt.wantPoints > 0 && res.Panels[0].Points != tt.wantPoints {
				t.Errorf("sampled %d points, want %d", res.Panels[0].Points, tt.wantPoints)
			}
			if tt.wantOther > 0 && res.Panels[0].OtherClasses != tt.wantOther {
				t.Errorf("%d rows of classes not laid out, want %d", res.Panels[0].OtherClasses, tt.wantOther)
			}
			img := decodePNGFile(t, out)
			if s := img.Bounds().Size(); s.X != tt.wantW || s.Y != tt.wantH {
				t.Errorf("the PNG is %dx%d, want %dx%d", s.X, s.Y, tt.wantW, tt.wantH)
			}
		})
	}
}

// Inputs t-SNE cannot lay out are refused in one line naming the file, or the flags.
func TestTSNECommandErrors(t *testing.T) {
	dir := t.TempDir()
	good, other, unlabelled := filepath.Join(dir, "good.parquet"), filepath.Join(dir, "other.parquet"), filepath.Join(dir, "unlabelled.parquet")
	writeClusterEmbeddings(t, good, []string{"cat", "dog"}, 10, 0)
	writeClusterEmbeddings(t, other, []string{"car", "truck"}, 10, 0)
	writeClusterEmbeddings(t, unlabelled, nil, 0, 12)
	missing := filepath.Join(dir, "missing.parquet")
	out := filepath.Join(dir, "tsne.png")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{name: "no output", args: []string{"--input", good}, wantCode: exitUsage, want: "--input and --output are required"},
		{name: "labels do not match", args: []string{"--input", good + "," + other, "--label", "a", "--label", "b", "--label", "c", "--output", out},
			wantCode: exitUsage, want: "3 labels for 2 embedding sets"},
		{name: "class lists differ", args: []string{"--input", good + "," + other, "--output", out}, wantCode: exitError, want: "other.parquet were embedded from datasets whose class lists differ"},
		{name: "only unlabelled rows", args: []string{"--input", unlabelled, "--output", out}, wantCode: exitError, want: "unlabelled.parquet: no labelled rows to lay out (12 rows, 12 unlabelled)"},
		{name: "missing file", args: []string{"--input", missing, "--output", out}, wantCode: exitError, want: "missing.parquet"},
		{name: "bad perplexity", args: []string{"--input", good, "--output", out, "--perplexity", "0"}, wantCode: exitUsage, want: "--perplexity=0"},
		{name: "no rows per class", args: []string{"--input", good, "--output", out, "--per-class", "0"}, wantCode: exitUsage, want: "0 rows per class"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runDCL(append([]string{"tsne"}, tt.args...)...)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if last := lines[len(lines)-1]; code != tt.wantCode || !strings.HasPrefix(last, "dcl tsne: ") || !strings.Contains(last, tt.want) {
				t.Errorf("dcl tsne %v = %d, %q; want %d and a last line containing %q", tt.args, code, stderr, tt.wantCode, tt.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a failed dcl tsne left %s", out)
			}
		})
	}
}
