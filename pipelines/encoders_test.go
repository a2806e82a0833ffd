package pipelines

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// setBeamFlags sets Beam's runner flags for one test.
func setBeamFlags(t *testing.T, flags map[string]string) {
	t.Helper()
	for name, v := range flags {
		f := flag.CommandLine.Lookup(name)
		old := f.Value.String()
		t.Cleanup(func() { f.Value.Set(old) })
		if err := f.Value.Set(v); err != nil {
			t.Fatal(err)
		}
	}
}

// The backend asked for applies where the workers run in this process; remote workers have
// the CPU-only worker binary: auto means the CPU there, said in the log; cuda is refused,
// unless lenient (reproduce's runs, trained on the GPU, embedded by remote CPUs), which says
// so too.
func TestEmbedBackendWhereTheWorkersAre(t *testing.T) {
	tests := []struct {
		runner, environment, endpoint string
		give                          gpu.Kind
		lenient                       bool
		want                          gpu.Kind
		wantErr, wantLog              string
	}{
		{"", "", "", gpu.CUDA, false, gpu.CUDA, "", ""},
		{"", "", "", "", false, gpu.Auto, "", ""},
		{"direct", "", "", gpu.Auto, false, gpu.Auto, "", ""},
		{"flink", "LOOPBACK", "localhost:8099", gpu.CUDA, false, gpu.CUDA, "", ""},
		{"dataflow", "", "", gpu.Auto, false, gpu.CPU, "", "run elsewhere"},
		{"dataflow", "", "", gpu.CPU, false, gpu.CPU, "", ""},
		{"dataflow", "", "", gpu.CUDA, false, "", "only the CPU backend", ""},
		{"flink", "DOCKER", "localhost:8099", gpu.CUDA, true, gpu.CPU, "", "asked=cuda"},
		{"", "", "", "metal", false, "", "unknown backend", ""},
	}
	for _, tt := range tests {
		setBeamFlags(t, map[string]string{"runner": tt.runner, "environment_type": tt.environment, "endpoint": tt.endpoint})
		var logged bytes.Buffer
		got, err := ResolveEmbedBackend(tt.give, tt.lenient, slog.New(slog.NewTextHandler(&logged, nil)))
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !usage.Is(err) {
				t.Errorf("--runner=%s --backend=%s: error %v, want a usage error saying %q", tt.runner, tt.give, err, tt.wantErr)
			}
		case err != nil || got != tt.want:
			t.Errorf("--runner=%s --environment_type=%s --backend=%s: %q, %v; want %q", tt.runner, tt.environment, tt.give, got, err, tt.want)
		case !strings.Contains(logged.String(), tt.wantLog) || (tt.wantLog == "") != (logged.Len() == 0):
			t.Errorf("--runner=%s --backend=%s: logged %q, want %q", tt.runner, tt.give, logged.String(), tt.wantLog)
		}
	}
}

// One pipeline embeds several sets with one checkpoint, and every DoFn instance of every set
// uses the one encoder its plan loaded, which is closed when the run ends.
func TestEmbedsShareOneEncoder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pairs, singles := filepath.Join(dir, "pairs"), filepath.Join(dir, "singles")
	writePairShards(t, pairs, 40, 8, 2, 1, 2)
	writePairShards(t, singles, 30, 8, 1, 1, 3)
	run := trainTinyEncoder(t, pairs)
	before := encoderLoads.Load()
	var jobs []*EmbedJob
	for _, o := range []EmbedOptions{
		{Data: singles, Feature: trainstep.Backbone, Views: 1, Parts: 3, BatchSize: 4},
		// TF32 asked for: the CPU computes in float32 all the same, and says so.
		{Data: pairs, Feature: trainstep.Projection, Views: 2, Parts: 2, BatchSize: 8, Precision: trainstep.TF32},
	} {
		o.Checkpoint, o.Output, o.Backend, o.Logger, o.CodeVersion = run, filepath.Join(dir, "out-"+filepath.Base(o.Data)), gpu.CPU, discardLogger(), "v-test"
		job, err := PlanEmbed(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if job.Backend != gpu.CPU || job.Images != job.Rows*int64(o.Views) {
			t.Errorf("job on %q with %d images for %d rows of %d views", job.Backend, job.Images, job.Rows, o.Views)
		}
		jobs = append(jobs, job)
	}
	res, err := RunEmbeds(ctx, jobs...)
	if err != nil {
		t.Fatal(err)
	}
	if loads := encoderLoads.Load() - before; loads != 1 {
		t.Errorf("%d encoders loaded for two sets of 5 ranges, want 1", loads)
	}
	encoders.Lock()
	left := len(encoders.m)
	encoders.Unlock()
	if left != 0 {
		t.Errorf("%d encoders still held after the run", left)
	}
	if len(res) != 2 || res[0].Rows != 30 || res[1].Rows != 40 || res[1].Images != 80 || res[0].Backend != "cpu" {
		t.Fatalf("results %+v %+v", res[0], res[1])
	}
	for i, want := range []struct {
		n, views int
		feature  trainstep.Feature
	}{{30, 1, trainstep.Backbone}, {40, 2, trainstep.Projection}} {
		got, ids, err := LoadEmbeddings(ctx, res[i].Output)
		if err != nil {
			t.Fatal(err)
		}
		set, err := inspectEmbeddings(ctx, res[i].Output)
		if err != nil {
			t.Fatal(err)
		}
		if set.Meta[embeddings.MetaBackend] != "cpu" || set.Meta[embeddings.MetaArithmetic] != "float32" || set.Meta[embeddings.MetaCodeVersion] != "v-test" || set.Meta[embeddings.MetaCheckpoint] == "" {
			t.Errorf("%s: metadata %v: want the backend, its arithmetic (float32), the code version and the checkpoint", res[i].Output, set.Meta)
		}
		ref := wantEmbeddings(t, run, want.n, 0, want.views, want.feature)
		for r, id := range ids {
			for d, v := range got.Vectors.Row(r) {
				if v != ref[id][d] {
					t.Fatalf("%s id %d value %d: %v, the encoder alone gives %v", res[i].Output, id, d, v, ref[id][d])
				}
			}
		}
	}
}
