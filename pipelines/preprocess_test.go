package pipelines

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/dcl-beam/dcl-beam/pipelines/pipelinetest"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// TestPreprocessCIFARWritesEveryRowAsAugmentDoes runs the pipeline on a CIFAR-10 fixture and
// checks the result row by row: every record once per pass, in the shard Place chose, in
// Place's order, with the views augment.View makes from the source pixels; counts, labels
// and metrics that add up; and a dataset that Verify accepts.
func TestPreprocessCIFARWritesEveryRowAsAugmentDoes(t *testing.T) {
	o := cifarOptions(t, 6) // 30 train records in 8 units of up to 4
	res := mustPreprocess(t, o)
	m := res.Manifest
	const n = 30
	if m.Records != n || m.Rows != 2*n || len(m.Shards) != 6 || m.DeadLetters.Count != 0 {
		t.Fatalf("manifest: %d records, %d rows, %d shards, %d dead letters; want %d, %d, 6, 0",
			m.Records, m.Rows, len(m.Shards), m.DeadLetters.Count, n, 2*n)
	}
	want := PreprocessMetrics{RecordsRead: n, RecordsFetched: 2 * n, RowsWritten: 2 * n, ViewsWritten: 4 * n,
		BytesWritten: m.Bytes, ShardsWritten: 6}
	if res.Metrics != want {
		t.Errorf("metrics %+v, want %+v", res.Metrics, want)
	}
	sum := mustVerify(t, o.Output)
	wantLabels := map[int32]int64{}
	for i := range n {
		wantLabels[int32(pipelinetest.CIFAR10Label(i))] += 2
	}
	if !maps.Equal(sum.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", sum.Labels, wantLabels)
	}

	seen := map[string]int{}
	for _, s := range m.Shards {
		rows := readShardRows(t, shards.Join(o.Output, s.Path))
		var last uint64
		for i, r := range rows {
			var idx int
			if _, err := fmt.Sscanf(r.Key, "train/%06d", &idx); err != nil || int64(idx) != r.Index {
				t.Fatalf("%s row %d: key %q, index %d", s.Path, i, r.Key, r.Index)
			}
			part, order := shards.Place(o.Seed, int(r.Pass), r.Key, o.Parts)
			if part != s.Part || int(r.Pass) != s.Pass {
				t.Errorf("%s holds %s of pass %d, which Place puts in part %d", s.Path, r.Key, r.Pass, part)
			}
			if i > 0 && order < last {
				t.Errorf("%s: row %d is out of Place's order", s.Path, i)
			}
			last = order
			if int(r.Label) != pipelinetest.CIFAR10Label(idx) {
				t.Errorf("%s: label %d, want %d", r.Key, r.Label, pipelinetest.CIFAR10Label(idx))
			}
			src := pipelinetest.CIFAR10Image(idx)
			for v, got := range [][]byte{r.View1, r.View2} {
				view, err := augment.View(o.Augment, src, o.Seed, r.Key, int(r.Pass), v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, view.Pix) {
					t.Errorf("%s pass %d view %d differs from augment.View", r.Key, r.Pass, v)
				}
			}
			seen[fmt.Sprintf("%s/%d", r.Key, r.Pass)]++
		}
	}
	if len(seen) != 2*n {
		t.Errorf("%d distinct (key, pass) rows, want %d", len(seen), 2*n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%s written %d times", k, c)
		}
	}
	if got := res.Summary(o.Output); !bytes.Contains([]byte(got), []byte("30 records → 60 rows (120 views) in 6 shards")) {
		t.Errorf("summary %q", got)
	}
	_ = context.Background()
}
