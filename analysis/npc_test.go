package analysis

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// refNPC is the paper's Eq. 4 written out directly, without log-sum-exp: fine at moderate
// temperatures.
func refNPC(z1, z2 [][]float64, tau float64) []float64 {
	n := len(z1)
	norm := func(x []float64) []float64 {
		var s float64
		for _, v := range x {
			s += v * v
		}
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v / math.Sqrt(s)
		}
		return out
	}
	views := [2][][]float64{}
	for i := range n {
		views[0] = append(views[0], norm(z1[i]))
		views[1] = append(views[1], norm(z2[i]))
	}
	dot := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	var q []float64
	for k := range 2 {
		for i := range n {
			pos := math.Exp(dot(views[k][i], views[1-k][i]) / tau)
			var u float64
			for l := range 2 {
				for j := range n {
					if j != i {
						u += math.Exp(dot(views[k][i], views[l][j]) / tau)
					}
				}
			}
			q = append(q, 1-pos/(pos+u))
		}
	}
	return q
}

// RandomPairs returns n view pairs of dim-d vectors: z2 is z1 plus noise. Exported (from this
// test file) for the external tests of npc_trainstep_test.go.
func RandomPairs(r *rand.Rand, n, dim int, noise float64) (z1, z2 [][]float64) {
	for range n {
		a, b := make([]float64, dim), make([]float64, dim)
		for d := range dim {
			a[d] = r.NormFloat64()
			b[d] = a[d] + noise*r.NormFloat64()
		}
		z1, z2 = append(z1, a), append(z2, b)
	}
	return z1, z2
}

func TestNPCMultipliersMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, tt := range []struct {
		n, dim int
		tau    float64
	}{{2, 3, 0.5}, {5, 8, 0.5}, {17, 16, 0.2}, {33, 7, 1}} {
		z1, z2 := RandomPairs(r, tt.n, tt.dim, 0.5)
		got, err := NPCMultipliers(z1, z2, tt.tau)
		if err != nil {
			t.Fatal(err)
		}
		want := refNPC(z1, z2, tt.tau)
		for a := range want {
			if math.Abs(got[a]-want[a]) > 1e-12 {
				t.Errorf("n=%d τ=%v anchor %d: q = %.15f, reference %.15f", tt.n, tt.tau, a, got[a], want[a])
			}
		}
	}
}

func TestNPCMultipliersLowTemperatureFinite(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	z1, z2 := RandomPairs(r, 64, 32, 0.1)
	q, err := NPCMultipliers(z1, z2, 0.005) // logits reach ±200: exp would overflow
	if err != nil {
		t.Fatal(err)
	}
	for a, v := range q {
		if math.IsNaN(v) || v < 0 || v > 1 {
			t.Fatalf("anchor %d: q = %v", a, v)
		}
	}
}

func TestNPCMultipliersErrors(t *testing.T) {
	ok := [][]float64{{1, 0}, {0, 1}}
	tests := []struct {
		z1, z2 [][]float64
		tau    float64
		want   string
	}{
		{[][]float64{{1, 0}}, [][]float64{{1, 0}}, 0.1, "at least 2 view pairs"},
		{ok, ok[:1], 0.1, "z1 has 2 rows but z2 has 1"},
		{ok, [][]float64{{1, 0}, {0, 1, 2}}, 0.1, "z2 row 1 has 3 values"},
		{ok, [][]float64{{1, 0}, {math.NaN(), 1}}, 0.1, "z2[1][0] = NaN"},
		{ok, ok, 0, "temperature 0"},
	}
	for _, tt := range tests {
		if _, err := NPCMultipliers(tt.z1, tt.z2, tt.tau); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want %q", err, tt.want)
		}
	}
}

func TestNPCBatches(t *testing.T) {
	batches, err := NPCBatches(100, 32, 7, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 6 {
		t.Fatalf("%d batches of 32 from 100 pairs in 2 passes, want 6", len(batches))
	}
	for pass := range 2 {
		seen := map[int]bool{}
		for _, b := range batches[pass*3 : pass*3+3] {
			for _, i := range b {
				if seen[i] || i < 0 || i >= 100 {
					t.Fatalf("pass %d: index %d repeated or out of range", pass, i)
				}
				seen[i] = true
			}
		}
	}
	if slices.Equal(batches[0], batches[3]) {
		t.Error("the second pass repeats the first")
	}
	again, _ := NPCBatches(100, 32, 7, 2, 0)
	if !reflect.DeepEqual(batches, again) {
		t.Error("same seed, different batches")
	}
	other, _ := NPCBatches(100, 32, 8, 2, 0)
	if reflect.DeepEqual(batches, other) {
		t.Error("different seeds, same batches")
	}
	capped, _ := NPCBatches(100, 32, 7, 2, 4)
	if len(capped) != 4 || !reflect.DeepEqual(capped, batches[:4]) {
		t.Errorf("capped at 4: %d batches", len(capped))
	}
	if _, err := NPCBatches(100, 128, 7, 1, 0); err == nil || !strings.Contains(err.Error(), "batch size 128 needs at least 128 view pairs, have 100") {
		t.Errorf("batch larger than the set: %v", err)
	}
}

func toVectors(rows [][]float64) Vectors {
	v := Vectors{Dim: len(rows[0])}
	for _, r := range rows {
		for _, x := range r {
			v.Data = append(v.Data, float32(x))
		}
	}
	return v
}

func TestNPCStatistics(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	z1f, z2f := RandomPairs(r, 300, 16, 1.0)
	z1, z2 := toVectors(z1f), toVectors(z2f)
	cfg := NPCConfig{BatchSizes: []int{8, 32, 128}, Temperature: 0.2, Seed: 3, Passes: 2, Bins: 20, Workers: 1}
	one, err := NPCStatistics(z1, z2, "pairs.parquet", cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 3
	three, err := NPCStatistics(z1, z2, "pairs.parquet", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, three) {
		t.Error("1 and 3 workers give different statistics")
	}
	for s, st := range one {
		size := cfg.BatchSizes[s]
		wantBatches := 2 * (300 / size)
		if st.BatchSize != size || st.Batches != wantBatches || st.Anchors != int64(2*size*wantBatches) {
			t.Errorf("size %d: %d batches, %d anchors", size, st.Batches, st.Anchors)
		}
		if st.Histogram.Total() != st.Anchors || st.Histogram.Under != 0 || st.Histogram.Over != 0 {
			t.Errorf("size %d: histogram counts %d of %d anchors", size, st.Histogram.Total(), st.Anchors)
		}
		// The same numbers straight from the batches.
		batches, _ := NPCBatches(300, size, 3, 2, 0)
		var all []float64
		for _, b := range batches {
			all = append(all, NPCBatch(z1, z2, b, 0.2)...)
		}
		var mean float64
		for _, q := range all {
			mean += q
		}
		mean /= float64(len(all))
		var ss float64
		for _, q := range all {
			ss += (q - mean) * (q - mean)
		}
		std := math.Sqrt(ss / float64(len(all)))
		if math.Abs(st.Mean-mean) > 1e-12 || math.Abs(st.Std-std) > 1e-12 || math.Abs(st.CV-std/mean) > 1e-12 {
			t.Errorf("size %d: mean %v std %v cv %v, want %v %v %v", size, st.Mean, st.Std, st.CV, mean, std, std/mean)
		}
		if st.Min != slices.Min(all) || st.Max != slices.Max(all) {
			t.Errorf("size %d: min/max %v %v", size, st.Min, st.Max)
		}
		if s > 0 && st.Mean <= one[s-1].Mean {
			t.Errorf("mean q %v at batch %d is not above %v at batch %d: more negatives must raise q", st.Mean, size, one[s-1].Mean, cfg.BatchSizes[s-1])
		}
	}
	if _, err := NPCStatistics(z1, z2.Slice(0, 200), "pairs.parquet", cfg); err == nil || !strings.Contains(err.Error(), "pairs.parquet: 300 view-1 embeddings but 200 view-2") {
		t.Errorf("mismatched views: %v", err)
	}
	cfg.BatchSizes = []int{512}
	if _, err := NPCStatistics(z1, z2, "pairs.parquet", cfg); err == nil || !strings.Contains(err.Error(), "pairs.parquet: batch size 512") {
		t.Errorf("batch larger than the set: %v", err)
	}
}

func TestQuantileMatchesNumpy(t *testing.T) {
	// np.quantile(v, p) with the default linear method.
	v := []float64{1, 2, 3, 4, 10}
	tests := []struct{ p, want float64 }{{0, 1}, {0.25, 2}, {0.5, 3}, {0.9, 7.6}, {1, 10}, {0.1, 1.4}}
	for _, tt := range tests {
		if got := quantileSorted(v, tt.p); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("quantile %v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := quantileSorted([]float64{5}, 0.5); got != 5 {
		t.Errorf("quantile of one value %v", got)
	}
}

func TestHistogram(t *testing.T) {
	h := NewHistogram(0, 1, 4)
	for _, x := range []float64{0, 0.2499, 0.25, 0.5, 0.99, 1, -0.1, 1.5, math.NaN()} {
		h.Add(x)
	}
	want := Histogram{Lo: 0, Hi: 1, Counts: []int64{2, 1, 1, 2}, Under: 1, Over: 2}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("histogram %+v, want %+v", h, want)
	}
	if h.Total() != 9 {
		t.Errorf("total %d, want 9", h.Total())
	}
}
