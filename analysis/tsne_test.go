package analysis

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// gaussianClusters returns perCluster points around each of k centres in dim dimensions:
// centres are far apart (distance about 14) and the spread is 1.
func gaussianClusters(k, perCluster, dim int, seed uint64) (Vectors, []int32) {
	r := rand.New(rand.NewPCG(seed, 2))
	v := Vectors{Dim: dim}
	var labels []int32
	for c := range k {
		centre := make([]float64, dim)
		for d := range centre {
			centre[d] = 10 * r.NormFloat64()
		}
		for range perCluster {
			for d := range dim {
				v.Data = append(v.Data, float32(centre[d]+r.NormFloat64()))
			}
			labels = append(labels, int32(c))
		}
	}
	return v, labels
}

// t-SNE keeps well-separated clusters apart: nearly every point's nearest neighbours in the
// layout are of its own cluster, which a random layout of the same points is far from.
func TestTSNESeparatesClusters(t *testing.T) {
	v, labels := gaussianClusters(4, 40, 20, 1)
	cfg := DefaultTSNEConfig()
	cfg.Normalize = false
	cfg.Iterations = 500
	res, err := TSNE(t.Context(), v, cfg, "clusters")
	if err != nil {
		t.Fatal(err)
	}
	agree, err := NeighbourAgreement(res.X, res.Y, labels, 5)
	if err != nil {
		t.Fatal(err)
	}
	if agree < 0.95 {
		t.Errorf("neighbour label agreement of the layout = %.3f, want ≥ 0.95 for separated clusters", agree)
	}
	r := rand.New(rand.NewPCG(9, 9))
	rx, ry := make([]float64, len(res.X)), make([]float64, len(res.Y))
	for i := range rx {
		rx[i], ry[i] = r.NormFloat64(), r.NormFloat64()
	}
	random, err := NeighbourAgreement(rx, ry, labels, 5)
	if err != nil {
		t.Fatal(err)
	}
	if random > 0.6 {
		t.Errorf("a random layout scores %.3f: the measure cannot tell a layout that separates clusters", random)
	}
	if !(res.KL > 0) || res.KL > 2 {
		t.Errorf("KL(P‖Q) = %v, want a small positive divergence for a converged layout", res.KL)
	}
}

// The layout depends on the seed and the input only: not on the number of goroutines, and
// not on the call.
func TestTSNEIsDeterministic(t *testing.T) {
	v, _ := gaussianClusters(3, 20, 8, 2)
	run := func(seed uint64, workers int) TSNEResult {
		cfg := DefaultTSNEConfig()
		cfg.Iterations, cfg.Seed, cfg.Workers = 200, seed, workers
		res, err := TSNE(t.Context(), v, cfg, "clusters")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b, c := run(5, 1), run(5, 3), run(6, 1)
	if !slices.Equal(a.X, b.X) || !slices.Equal(a.Y, b.Y) || a.KL != b.KL {
		t.Error("the same seed gave other layouts with 1 and 3 workers")
	}
	if slices.Equal(a.X, c.X) {
		t.Error("seeds 5 and 6 gave the same layout: the seed is not used")
	}
}

func TestTSNERefusesBadInput(t *testing.T) {
	v, _ := gaussianClusters(2, 5, 4, 3)
	tests := []struct {
		name string
		give Vectors
		cfg  func(*TSNEConfig)
		want string
	}{
		{name: "empty", give: Vectors{Dim: 4}, want: "src.parquet: no vectors"},
		{name: "too many", give: Vectors{Dim: 1, Data: make([]float32, MaxTSNEPoints+1)}, want: "src.parquet: 10001 vectors"},
		{name: "non-finite", give: Vectors{Dim: 2, Data: []float32{0, 1, 2, float32(math.Inf(1))}}, want: "src.parquet: row 1: non-finite"},
		{name: "perplexity", give: v, cfg: func(c *TSNEConfig) { c.Perplexity = 0 }, want: "positive perplexity"},
		{name: "iterations", give: v, cfg: func(c *TSNEConfig) { c.Iterations = 0 }, want: "at least one iteration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultTSNEConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			_, err := TSNE(t.Context(), tt.give, cfg, "src.parquet")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("TSNE = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// A set smaller than 3·perplexity gets a lower perplexity rather than a failed calibration,
// and a single point sits at the origin.
func TestTSNESmallSets(t *testing.T) {
	v, labels := gaussianClusters(2, 4, 6, 4)
	cfg := DefaultTSNEConfig()
	cfg.Normalize = false
	res, err := TSNE(t.Context(), v, cfg, "small")
	if err != nil {
		t.Fatal(err)
	}
	if agree, _ := NeighbourAgreement(res.X, res.Y, labels, 2); agree < 1 {
		t.Errorf("8 points in 2 separated clusters: agreement %.2f, want 1", agree)
	}
	one, err := TSNE(t.Context(), Vectors{Dim: 2, Data: []float32{3, 4}}, cfg, "one")
	if err != nil || len(one.X) != 1 || one.X[0] != 0 || one.Y[0] != 0 {
		t.Errorf("TSNE of one point = %+v, %v; want it at the origin", one, err)
	}
}

// The class sample keeps at most perClass rows of each label, drawn from the whole stream,
// the same rows for the same seed.
func TestClassSample(t *testing.T) {
	sizes := map[int32]int{0: 5, 1: 50, 2: 500}
	draw := func(seed uint64) (LabeledVectors, map[int32]int64) {
		s := NewClassSample(20, seed)
		row := int64(0)
		for l := int32(0); l < 3; l++ {
			for range sizes[l] {
				if err := s.Add(row, l, []float32{float32(row), float32(l)}); err != nil {
					t.Fatal(err)
				}
				row++
			}
		}
		return s.Result("stream"), s.Seen()
	}
	a, seen := draw(1)
	counts := map[int32]int{}
	last := map[int32]float32{}
	for i, l := range a.Labels {
		counts[l]++
		if v := a.Vectors.Row(i); v[1] != float32(l) {
			t.Fatalf("row %d of the sample has label %d and the vector of label %v", i, l, v[1])
		} else {
			last[l] = max(last[l], v[0])
		}
	}
	if counts[0] != 5 || counts[1] != 20 || counts[2] != 20 || seen[2] != 500 {
		t.Errorf("sample counts %v (seen %v), want 5, 20 and 20 of 5, 50 and 500", counts, seen)
	}
	if last[2] < 300 {
		t.Errorf("the last row sampled of label 2 is row %v of rows 55–554: the sample is not from the whole stream", last[2])
	}
	b, _ := draw(1)
	c, _ := draw(2)
	if !slices.Equal(a.Vectors.Data, b.Vectors.Data) {
		t.Error("seed 1 drew two different samples")
	}
	if slices.Equal(a.Vectors.Data, c.Vectors.Data) {
		t.Error("seeds 1 and 2 drew the same sample")
	}
	s := NewClassSample(2, 1)
	s.Add(0, 0, []float32{1, 2})
	if err := s.Add(1, 0, []float32{1}); err == nil || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("a vector of another length = %v, want an error naming row 1", err)
	}
}

// A cancelled context (dcl tsne's, on SIGINT or SIGTERM) stops t-SNE with the context's
// error, while it computes the affinities (1000 points, cancelled after 20 ms) and while it
// iterates (100 points), however many iterations remain.
func TestTSNEStopsWhenCancelled(t *testing.T) {
	for _, tc := range []struct {
		name       string
		perCluster int
		after      time.Duration
	}{{"affinities", 250, 20 * time.Millisecond}, {"iterations", 25, 200 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := gaussianClusters(4, tc.perCluster, 20, 3)
			cfg := DefaultTSNEConfig()
			cfg.Iterations = 1 << 30
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := TSNE(ctx, v, cfg, "clusters")
				done <- err
			}()
			time.Sleep(tc.after)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled t-SNE returned %v, want %v", err, context.Canceled)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("t-SNE still runs 10 s after its context was cancelled")
			}
		})
	}
}
