package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
)

// errAborted is what an aborted atomic file tells Create, so that it discards the file.
var errAborted = errors.New("write aborted")

// Writer is an io.Writer onto Create: bytes written go to the file under a temporary
// name (or an uncommitted upload) and appear under the final name only on Commit; Abort (or
// a failed write) leaves nothing under the final name. It counts
// the bytes and hashes them on the way, so a caller knows the committed file's size and
// sha256 without reading it back.
//
// Create takes a callback; the pipeline's DoFns and the trainer push data over time, so
// the callback runs in a goroutine that copies from a pipe.
type Writer struct {
	path string
	pw   *io.PipeWriter
	done chan error
	sum  hash.Hash
	n    int64
	err  error // sticky: once a write failed, the file is lost
	over bool
}

// NewWriter starts writing the file p atomically.
func NewWriter(ctx context.Context, p string) *Writer {
	pr, pw := io.Pipe()
	f := &Writer{path: p, pw: pw, done: make(chan error, 1), sum: sha256.New()}
	go func() {
		err := Create(ctx, p, func(w io.Writer) error {
			_, err := io.Copy(w, pr)
			return err
		})
		// If Create failed before or while copying, unblock the writer side.
		if err != nil {
			pr.CloseWithError(err)
		} else {
			pr.CloseWithError(io.ErrClosedPipe)
		}
		f.done <- err
	}()
	return f
}

func (f *Writer) Write(b []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.pw.Write(b)
	f.sum.Write(b[:n])
	f.n += int64(n)
	if err != nil {
		f.err = err
	}
	return n, err
}

// Commit finishes the file: it appears under its final name when Commit returns nil.
func (f *Writer) Commit() (size int64, sha string, err error) {
	if f.over {
		return 0, "", errors.New("file already committed or aborted")
	}
	f.over = true
	f.pw.Close()
	if err := <-f.done; err != nil {
		return 0, "", err
	}
	return f.n, hex.EncodeToString(f.sum.Sum(nil)), nil
}

// Abort discards the file; nothing is left under its final name. Safe to call after Commit
// (it does nothing then) and more than once.
func (f *Writer) Abort() {
	if f.over {
		return
	}
	f.over = true
	f.pw.CloseWithError(errAborted)
	<-f.done
}
