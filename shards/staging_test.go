package shards

import (
	"context"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// TestUncommittedShardsAreNoData: shards written and not committed (a run killed before its
// commit step) are seen by no glob of ROOT/**/*.parquet, neither DuckDB's (which looks in
// hidden folders too) nor a hidden-skipping reader's; Commit makes every shard visible under
// its final name. Where $DCL_DUCKDB_NODE_MODULES holds @duckdb/node-api, DuckDB itself reads
// the glob too.
func TestUncommittedShardsAreNoData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := testConfig()
	if err := Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []ShardInfo
	var rows int64
	for part := range cfg.Parts {
		for pass := range cfg.Passes {
			w, err := NewWriter(ctx, dir, ShardID{Pass: pass, Part: part, Parts: cfg.Parts}, cfg, WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := int64(part); i < 12; i += int64(cfg.Parts) {
				v := testImage(cfg.Height, cfg.Width, cfg.Channels, i, pass, 1)
				var v2 transforms.Image
				if cfg.Views == 2 {
					v2 = testImage(cfg.Height, cfg.Width, cfg.Channels, i, pass, 2)
				}
				if err := w.WriteViews(testKey(i), i, testLabel(i), v, v2); err != nil {
					t.Fatal(err)
				}
				rows++
			}
			info, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			infos = append(infos, info)
		}
	}
	glob := dir + "/**/*.parquet"
	for _, skipHidden := range []bool{false, true} {
		if seen := testfiles.GlobParquet(t, dir, skipHidden); len(seen) > 0 {
			t.Errorf("before the commit, a glob (skipping hidden entries: %v) sees %v", skipHidden, seen)
		}
	}
	if n, duckErr, ok := testfiles.DuckDBCount(t, glob); ok {
		if !strings.Contains(duckErr, "No files found") {
			t.Errorf("DuckDB read %d rows of uncommitted shards (error %q)", n, duckErr)
		}
	} else {
		t.Log("DuckDB not checked: set DCL_DUCKDB_NODE_MODULES to a node_modules folder holding @duckdb/node-api")
	}

	if _, err := Commit(ctx, dir, cfg, infos, 12, DeadLetters{}); err != nil {
		t.Fatal(err)
	}
	for _, skipHidden := range []bool{false, true} {
		if seen := testfiles.GlobParquet(t, dir, skipHidden); len(seen) != len(infos) {
			t.Errorf("after the commit, a glob (skipping hidden entries: %v) sees %d files, want the %d shards", skipHidden, len(seen), len(infos))
		}
	}
	if n, duckErr, ok := testfiles.DuckDBCount(t, glob); ok && n != rows {
		t.Errorf("DuckDB reads %d rows of the committed shards, want %d (%s)", n, rows, duckErr)
	}
	if _, err := ReadManifest(ctx, dir); err != nil {
		t.Errorf("the committed dataset: %v", err)
	}
}
