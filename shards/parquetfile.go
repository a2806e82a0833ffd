package shards

import (
	"context"
	"fmt"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// ParquetFile writes a Parquet file of rows T atomically (a storage.Writer: the file appears
// under its name only when Commit succeeds), with a sticky error: the first failure discards
// the file, and every later call returns that failure. The shard writer and the embeddings
// writer are built on it.
type ParquetFile[T any] struct {
	ctx   context.Context
	where string // the file as write errors name it
	what  string // the file as the errors after Commit or Abort name it ("shard …")
	file  *storage.Writer
	pw    *parquet.GenericWriter[T]
	err   error
}

// NewParquetFile starts the file p (local or gs://). Write errors name it where; once it is
// committed or aborted, calls fail with "<what> already closed" or "<what> aborted".
func NewParquetFile[T any](ctx context.Context, p, where, what string, options ...parquet.WriterOption) *ParquetFile[T] {
	f := storage.NewWriter(ctx, p)
	return &ParquetFile[T]{ctx: ctx, where: where, what: what, file: f, pw: parquet.NewGenericWriter[T](f, options...)}
}

// Err is the sticky error: nil while the file is open.
func (f *ParquetFile[T]) Err() error { return f.err }

// Fail discards the file, unless it has already failed, and returns the sticky error.
func (f *ParquetFile[T]) Fail(err error) error {
	if f.err == nil {
		f.err = err
		f.file.Abort()
	}
	return f.err
}

// Write writes rows to the current row group.
func (f *ParquetFile[T]) Write(rows []T) error {
	if f.err != nil {
		return f.err
	}
	if _, err := f.pw.Write(rows); err != nil {
		return f.Fail(fmt.Errorf("writing %s: %w", f.where, err))
	}
	return nil
}

// Flush ends the current row group.
func (f *ParquetFile[T]) Flush() error {
	if f.err != nil {
		return f.err
	}
	if err := f.pw.Flush(); err != nil {
		return f.Fail(fmt.Errorf("writing %s: %w", f.where, err))
	}
	return nil
}

// Commit writes the footer and commits the file under its name, returning its size and
// sha256 (hex). After an error nothing is committed.
func (f *ParquetFile[T]) Commit() (size int64, sum string, err error) {
	if f.err != nil {
		return 0, "", f.err
	}
	if err := f.ctx.Err(); err != nil {
		return 0, "", f.Fail(err)
	}
	if err := f.pw.Close(); err != nil {
		return 0, "", f.Fail(fmt.Errorf("writing %s: %w", f.where, err))
	}
	if size, sum, err = f.file.Commit(); err != nil {
		f.err = err
		return 0, "", err
	}
	f.err = fmt.Errorf("%s already closed", f.what)
	return size, sum, nil
}

// Abort discards the file. It is safe after Commit and more than once.
func (f *ParquetFile[T]) Abort() {
	if f.err == nil {
		f.err = fmt.Errorf("%s aborted", f.what)
	}
	f.file.Abort()
}
