package tensorboard

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/tbtest"
)

// TestMaskedCRC checks the checksum against CRC-32C's check value (of "123456789",
// 0xe3069283) put through TFRecord's mask.
func TestMaskedCRC(t *testing.T) {
	crc := uint32(0xe3069283)
	want := ((crc >> 15) | (crc << 17)) + 0xa282ead8
	if got := MaskedCRC([]byte("123456789")); got != want {
		t.Errorf("MaskedCRC = %08x, want %08x", got, want)
	}
}

func TestAppendRecordFraming(t *testing.T) {
	data := []byte("hello, event")
	rec := AppendRecord(nil, data)
	if len(rec) != 8+4+len(data)+4 {
		t.Fatalf("record is %d bytes, want %d", len(rec), 16+len(data))
	}
	if n := binary.LittleEndian.Uint64(rec); n != uint64(len(data)) {
		t.Errorf("length %d, want %d", n, len(data))
	}
	recs, err := tbtest.Records(rec)
	if err != nil || len(recs) != 1 || string(recs[0]) != string(data) {
		t.Errorf("decoded %q, %v", recs, err)
	}
	for _, at := range []int{0, 9, 14, len(rec) - 1} {
		bad := append([]byte(nil), rec...)
		bad[at] ^= 1
		if _, err := tbtest.Records(bad); err == nil {
			t.Errorf("byte %d flipped: no CRC error", at)
		}
	}
}

func TestWriterEvents(t *testing.T) {
	now := time.Unix(1700000000, 250_000_000)
	tests := []struct {
		name      string
		dir       func(t *testing.T) string
		firstStep int64
	}{
		{"local fresh", func(t *testing.T) string { return filepath.Join(t.TempDir(), Dir) }, 1},
		{"local resumed", func(t *testing.T) string { return filepath.Join(t.TempDir(), Dir) }, 8},
		{"memfs", func(t *testing.T) string { return "memfs://" + strings.ReplaceAll(t.Name(), "/", "_") + "/" + Dir }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := tt.dir(t)
			w, err := Create(ctx, dir, now, tt.firstStep)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(storage.Base(w.Path()), NamePrefix+"1700000000.") {
				t.Errorf("file name %s: want %s<unix>.<host>", storage.Base(w.Path()), NamePrefix)
			}
			for s := tt.firstStep; s < tt.firstStep+3; s++ {
				if err := w.Scalars(s, now.Add(time.Second), Scalar{"loss", 1.5 / float64(s)}, Scalar{"lr", 0.3}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			data, err := storage.ReadFile(ctx, w.Path())
			if err != nil {
				t.Fatal(err)
			}
			events, err := tbtest.Events(data)
			if err != nil {
				t.Fatal(err)
			}
			const head = 2
			if len(events) != head+3 {
				t.Fatalf("%d events, want %d", len(events), head+3)
			}
			if events[0].FileVersion != FileVersion || events[0].WallTime != 1700000000.25 {
				t.Errorf("first event %+v: want file_version %q at the creation time", events[0], FileVersion)
			}
			if events[1].SessionStatus != 1 || events[1].Step != tt.firstStep {
				t.Errorf("second event %+v, want session_log START at the first step, %d", events[1], tt.firstStep)
			}
			for i, ev := range events[head:] {
				step := tt.firstStep + int64(i)
				if ev.Step != step || ev.Scalars["loss"] != float32(1.5/float64(step)) || ev.Scalars["lr"] != float32(0.3) ||
					strings.Join(ev.Tags, ",") != "loss,lr" || ev.FileVersion != "" {
					t.Errorf("event %d: %+v", i, ev)
				}
			}
		})
	}
}

// TestRemoteWritesAtFlush: objects cannot be appended to, so a remote file appears whole at
// each Flush and not before.
func TestRemoteWritesAtFlush(t *testing.T) {
	ctx := context.Background()
	w, err := Create(ctx, "memfs://flush/"+Dir, time.Unix(1, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := storage.Exists(ctx, w.Path()); ok {
		t.Errorf("%s exists before the first Flush", w.Path())
	}
	count := func() int {
		data, err := storage.ReadFile(ctx, w.Path())
		if err != nil {
			t.Fatal(err)
		}
		evs, err := tbtest.Events(data)
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	_ = w.Scalars(1, time.Unix(2, 0), Scalar{"loss", 1})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Errorf("after one step and Flush: %d events, want 3 (file version, session start, the step)", n)
	}
	_ = w.Scalars(2, time.Unix(3, 0), Scalar{"loss", 1})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 4 {
		t.Errorf("after two steps and Flush: %d events, want 4", n)
	}
}

// TestCreateKeepsEarlierFiles: a run resumed within the same second gets a file of its own.
func TestCreateKeepsEarlierFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Unix(1700000000, 0)
	var paths []string
	for range 3 {
		w, err := Create(ctx, dir, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, w.Path())
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || paths[0] == paths[1] || paths[1] == paths[2] {
		t.Errorf("3 writers in one second gave files %v", paths)
	}
}
