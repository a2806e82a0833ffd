package pipelines

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// The evaluations show, when they run in this process, the work their DoFns counted: every
// query searched against every bank group, every probe epoch, every NPC batch, every row
// embedded (not a total claimed at the end).
func TestEvaluationsShowTheirProgress(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(t, train, clustered(1, "train", 60, 4, 3), 2, nil)
	writeEmbeddings(t, test, clustered(2, "test", 20, 4, 3), 1, nil)
	pairs := filepath.Join(dir, "pairs")
	pairSet(t, pairs, 40, 3, map[string]string{embeddings.MetaViews: "2", embeddings.MetaTemperature: "0.2"})
	data := t.TempDir()
	writePairShards(t, data, 10, 8, 2, 1, 1)
	encoder := trainTinyEncoder(t, data)

	linear := analysis.DefaultLinearConfig().WithEpochs(5)
	tests := []struct {
		name string
		run  func(display progress.Options) error
		want string
	}{
		{"knn", func(d progress.Options) error {
			job, err := PlanKNN(ctx, KNNOptions{Train: train, Test: test, K: 5, BankGroups: 2})
			if err != nil {
				return err
			}
			job.Display = d
			_, err = RunKNN(ctx, job)
			return err
		}, "knn: 40/40 query searches (100%)"},
		{"linear", func(d progress.Options) error {
			job, err := PlanLinear(ctx, LinearOptions{Train: train, Test: test, Config: linear})
			if err != nil {
				return err
			}
			job.Display = d
			_, err = RunLinear(ctx, job)
			return err
		}, "linear: 5/5 epochs (100%)"},
		{"npc", func(d progress.Options) error {
			job, err := PlanNPC(ctx, NPCOptions{Embeddings: pairs, Output: t.TempDir(), BatchSizes: []int{8, 16}, Seed: 1, Passes: 1, Bins: 10})
			if err != nil {
				return err
			}
			job.Display = d
			_, err = RunNPC(ctx, job)
			return err
		}, "npc: 7/7 batches (100%)"}, // 40/8 + 40/16
		{"embed", func(d progress.Options) error {
			job, err := PlanEmbed(ctx, EmbedOptions{Checkpoint: encoder, Data: data, Output: filepath.Join(t.TempDir(), "emb"),
				Feature: "backbone", Views: 1, BatchSize: 4})
			if err != nil {
				return err
			}
			job.Display = d
			_, err = RunEmbed(ctx, job)
			return err
		}, "embed: 10/10 rows (100%)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var shown bytes.Buffer
			if err := tt.run(progress.Options{W: &shown, Mode: progress.Lines, Interval: time.Hour}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(shown.String()), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, tt.want) {
				t.Errorf("last progress line %q, want %q", last, tt.want)
			}
		})
	}
}

// A count is shown only where the DoFns run in this process; a remote runner's workers
// cannot reach it, and a count that stays at 0 would lie.
func TestProgressOnlyWhereTheWorkersAre(t *testing.T) {
	tests := []struct {
		runner, environment, endpoint string
		want                          bool
	}{
		{"", "", "", true}, // prism in this process
		{"prism", "", "", true},
		{"direct", "", "", true},
		{"flink", "LOOPBACK", "localhost:8099", true},
		{"flink", "DOCKER", "localhost:8099", false},
		{"prism", "DOCKER", "localhost:8073", false}, // a prism job server of its own
		{"dataflow", "", "", false},
	}
	for _, tt := range tests {
		for name, v := range map[string]string{"runner": tt.runner, "environment_type": tt.environment, "endpoint": tt.endpoint} {
			f := flag.CommandLine.Lookup(name)
			old := f.Value.String()
			t.Cleanup(func() { f.Value.Set(old) })
			if err := f.Value.Set(v); err != nil {
				t.Fatal(err)
			}
		}
		var shown bytes.Buffer
		p, end := watch(progress.Options{W: &shown, Mode: progress.Lines, Interval: time.Hour}, "embed", 10, "rows", "")
		p.addDone(4)
		end(true)
		if got := shown.Len() > 0; got != tt.want || (p != nil) != tt.want {
			t.Errorf("--runner=%q --environment_type=%q: shown %v (%q), want %v", tt.runner, tt.environment, got, shown.String(), tt.want)
		}
	}
}
