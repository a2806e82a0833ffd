package embeddings

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
)

// BenchmarkRead reads a file of 16,384 rows of 512 values (32 MiB of floats, four row
// groups), this project's layout, in blocks of 4,096 rows.
func BenchmarkRead(b *testing.B) {
	ctx := context.Background()
	p := filepath.Join(b.TempDir(), "e.parquet")
	const rows, dim = 16384, 512
	w, err := NewWriter(ctx, p, dim, nil)
	if err != nil {
		b.Fatal(err)
	}
	vec := make([]float32, dim)
	for i := range rows {
		for j := range vec {
			vec[j] = float32(i + j)
		}
		if err := w.Write(int64(i), int32(i%10), vec); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(rows * dim * 4)
	for b.Loop() {
		r, err := Open(ctx, p, 4096)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			blk, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += blk.Len()
		}
		r.Close()
		if n != rows {
			b.Fatalf("read %d rows, want %d", n, rows)
		}
	}
}
