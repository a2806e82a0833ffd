//go:build cuda

package pipelines

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/testing/encodertest"
	"github.com/dcl-beam/dcl-beam/internal/testing/xlacputest"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/verify"
)

// TestXLACPUEmbed is `dcl embed --backend=xla-cpu` against `--backend=cpu`: the same rows, and
// every embedding within the tolerance the checkpoint's error model derives for float32.
func TestXLACPUEmbed(t *testing.T) {
	xlacputest.Require(t)
	ctx := context.Background()
	data := t.TempDir()
	const n = 37
	writePairShards(t, data, n, 8, 2, 1, 2)
	run := encodertest.TrainTinyCNNEncoder(t, data)
	var vecs [2][][]float32
	for i, kind := range []gpu.Kind{gpu.XLACPU, gpu.CPU} {
		o := EmbedOptions{Checkpoint: run, Data: data, Feature: trainstep.Backbone, Views: 1, Pass: 0, BatchSize: 16,
			Backend: kind, Output: filepath.Join(t.TempDir(), "emb")}
		job, err := PlanEmbed(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if job.Backend != kind {
			t.Errorf("asked for %s, embedding on %s", kind, job.Backend)
		}
		if _, err := RunEmbed(ctx, job); err != nil {
			t.Fatal(err)
		}
		emb, ids, err := LoadEmbeddings(ctx, o.Output)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[int64][]float32{}
		for r, id := range ids {
			byID[id] = emb.Vectors.Row(r)
		}
		for id := range int64(n) {
			v, ok := byID[id]
			if !ok {
				t.Fatalf("%s: image %d not embedded", kind, id)
			}
			vecs[i] = append(vecs[i], v)
		}
	}
	model, err := verify.NewErrorModel(ctx, run, trainstep.Backbone)
	if err != nil {
		t.Fatal(err)
	}
	tol := model.Tolerance(verify.Float32Arithmetic, verify.Float32Arithmetic)
	a, err := analysis.VectorsFromRows(vecs[0], "xla-cpu")
	if err != nil {
		t.Fatal(err)
	}
	b, err := analysis.VectorsFromRows(vecs[1], "cpu")
	if err != nil {
		t.Fatal(err)
	}
	d, err := verify.CompareVectors(a, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows: largest relative difference %.3g, rms %.3g; tolerance %.3g", d.Rows, d.Max, d.RMS, tol)
	if d.Rows != n || d.Max > tol || !(d.Max > 0) {
		t.Errorf("xla-cpu against cpu: %d rows, largest difference %.3g: want %d rows within %.3g (and float32's rounding showing)", d.Rows, d.Max, n, tol)
	}
}
