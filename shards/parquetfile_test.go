package shards

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A ParquetFile's first failure sticks and leaves nothing under the file's name; a committed
// file stays when aborted afterwards, and takes no more rows.
func TestParquetFileFailureSticks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rows := []Row{{Key: "a", View1: []byte{1}, Height: 1, Width: 1, Channels: 1, Encoding: string(Raw)}}

	failed := filepath.Join(dir, "failed.parquet")
	f := NewParquetFile[Row](ctx, failed, "failed.parquet", "shard failed")
	if err := f.Write(rows); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := f.Fail(boom); !errors.Is(err, boom) {
		t.Fatalf("Fail = %v", err)
	}
	if err := f.Fail(errors.New("later")); !errors.Is(err, boom) {
		t.Errorf("a second failure replaced the first: %v", err)
	}
	if _, _, err := f.Commit(); !errors.Is(err, boom) {
		t.Errorf("Commit after a failure = %v, want the failure", err)
	}
	if _, err := os.Stat(failed); !os.IsNotExist(err) {
		t.Errorf("a failed file is there: %v", err)
	}

	kept := filepath.Join(dir, "kept.parquet")
	f = NewParquetFile[Row](ctx, kept, "kept.parquet", "shard kept")
	if err := f.Write(rows); err != nil {
		t.Fatal(err)
	}
	size, sum, err := f.Commit()
	if err != nil || size == 0 || len(sum) != 64 {
		t.Fatalf("Commit = %d, %q, %v", size, sum, err)
	}
	if err := f.Write(rows); err == nil || !strings.Contains(err.Error(), "shard kept already closed") {
		t.Errorf("Write after Commit = %v", err)
	}
	f.Abort()
	if info, err := os.Stat(kept); err != nil || info.Size() != size {
		t.Errorf("the committed file after Abort: %v, %v", info, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	cancelled := filepath.Join(dir, "cancelled.parquet")
	f = NewParquetFile[Row](ctx, cancelled, "cancelled.parquet", "shard cancelled")
	cancel()
	if _, _, err := f.Commit(); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit with a cancelled context = %v", err)
	}
	if _, err := os.Stat(cancelled); !os.IsNotExist(err) {
		t.Errorf("a cancelled file is there: %v", err)
	}
}
