package pipelines

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// cifarOptions preprocesses a CIFAR-10 fixture of 5·perFile train records written in a new
// folder: 2 passes of simclr-cifar pairs in 3 shards each, units of 4 records.
func cifarOptions(t testing.TB, perFile int) PreprocessOptions {
	t.Helper()
	in := t.TempDir()
	pipelinetest.WriteCIFAR10(t, in, perFile)
	return PreprocessOptions{
		Spec:        datasets.Spec{Dataset: datasets.CIFAR10, Input: in, Split: "train", UnitRecords: 4},
		Output:      filepath.Join(t.TempDir(), "out"),
		Augment:     preset(t, augment.SimCLRCIFAR, 32),
		Passes:      2,
		Seed:        7,
		Parts:       3,
		CodeVersion: "test",
	}
}

func preset(t testing.TB, name string, size int) augment.Config {
	t.Helper()
	c, err := augment.Preset(name, size)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// quietRunners silences the runners' logs (prism logs every failed bundle several times
// over) unless the tests run with -v.
var quietRunners sync.Once

// runPreprocess plans and runs a job on prism, in process.
func runPreprocess(t testing.TB, o PreprocessOptions) (*PreprocessResult, error) {
	t.Helper()
	quietRunners.Do(func() {
		if !testing.Verbose() {
			slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
		}
	})
	ctx := context.Background()
	job, err := PlanPreprocess(ctx, o)
	if err != nil {
		return nil, err
	}
	return RunPreprocess(ctx, job)
}

func mustPreprocess(t testing.TB, o PreprocessOptions) *PreprocessResult {
	t.Helper()
	res, err := runPreprocess(t, o)
	if err != nil {
		t.Fatalf("preprocess: %v", err)
	}
	return res
}

func mustVerify(t testing.TB, dir string) shards.Summary {
	t.Helper()
	sum, err := shards.Verify(context.Background(), dir)
	if err != nil {
		t.Fatalf("verify %s: %v (%+v)", dir, err, sum.Problems)
	}
	return sum
}

func sameFiles(t testing.TB, got, want map[string]string) {
	t.Helper()
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s is missing", p)
		} else if g != w {
			t.Errorf("%s differs: sha256 %s, want %s", p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s should not be there", p)
		}
	}
}

func wantErrorMentions(t testing.TB, err error, pieces ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one mentioning %q", pieces)
	}
	for _, p := range pieces {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// readAllRows reads every row of a dataset in manifest order.
func readAllRows(t testing.TB, dir string) []shards.Row {
	t.Helper()
	ctx := context.Background()
	m, err := shards.ReadManifest(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var rows []shards.Row
	for _, s := range m.Shards {
		rows = append(rows, readShardRows(t, storage.Join(dir, s.Path))...)
	}
	return rows
}

// readShardRows reads every row of one local shard.
func readShardRows(t testing.TB, p string) []shards.Row {
	t.Helper()
	rows, err := parquet.ReadFile[shards.Row](p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return rows
}
