// Package tensorboard writes TensorBoard event files of scalars, so that `tensorboard
// --logdir runs/` shows a training run's curves without TensorFlow or a protobuf library:
// the records (TFRecord framing with masked CRC-32C) and the Event protos are encoded here
// by hand, following tensorflow/core/util/event.proto and summary.proto.
package tensorboard

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Dir is the folder of a run's event files, inside the run's output folder.
const Dir = "tensorboard"

// FileVersion is the file_version of the first event of every file; TensorBoard reads
// version 2 files.
const FileVersion = "brain.Event:2"

// NamePrefix starts the name of every event file: TensorBoard reads the files whose name
// holds "tfevents".
const NamePrefix = "events.out.tfevents."

// Scalar is one tagged value of a step.
type Scalar struct {
	Tag   string
	Value float64
}

// Writer appends events to one event file. Locally the file is appended to as events come
// (TensorBoard reads it while it grows, as it does TensorFlow's) and synced by Flush; on
// gs:// and memfs:// objects cannot be appended to, so Flush writes the whole file again,
// atomically. A Writer is not safe for concurrent use.
type Writer struct {
	path string
	file *os.File // local output
	data []byte   // the whole file, for remote output
}

// Create starts a new event file in dir named after now and this host, so that a resumed run
// adds a file beside those of earlier runs instead of rewriting them. firstStep is the first
// step the file will log (1 for a new run, the checkpoint's steps + 1 for a resumed one).
//
// Every file starts with a session START at firstStep, which is how TensorBoard's loader
// (event_accumulator) learns of a restart: it drops the events it has read with a step at or
// after that of a START, so the steps a killed run logged after its last checkpoint, which
// the resumed run logs again, are shown once. Older loaders purge at every START; newer ones
// ignore a run's first START and purge at the later ones: the first file's START (at step 1,
// before any event) makes both read the same.
func Create(ctx context.Context, dir string, now time.Time, firstStep int64) (*Writer, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ' ' {
			return '_'
		}
		return r
	}, host)
	base := fmt.Sprintf("%s%d.%s", NamePrefix, now.Unix(), host)
	w := &Writer{}
	if storage.Scheme(dir) == "" {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, fmt.Errorf("creating TensorBoard folder %s: %w", dir, err)
		}
	}
	// Two processes starting in the same second on the same host (a run stopped at once and
	// resumed) would share a name: a counter suffix keeps each file its own.
	for i := 0; ; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s.%d", base, i)
		}
		w.path = storage.Join(dir, name)
		if storage.Scheme(dir) != "" {
			exists, err := storage.Exists(ctx, w.path)
			if err != nil {
				return nil, err
			}
			if !exists {
				break
			}
			continue
		}
		f, err := os.OpenFile(w.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if os.IsExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating TensorBoard event file %s: %w", w.path, err)
		}
		w.file = f
		break
	}
	if firstStep < 1 {
		return nil, fmt.Errorf("TensorBoard event file in %s: first step %d, want at least 1", dir, firstStep)
	}
	wall := seconds(now)
	first := appendDouble(nil, 1, wall)
	first = appendVarint(appendTag(first, 2, wireVarint), uint64(firstStep))
	first = appendBytes(first, 3, []byte(FileVersion))
	if err := w.write(first); err != nil {
		return nil, err
	}
	// SessionLog{status: START}.
	ev := appendDouble(nil, 1, wall)
	ev = appendVarint(appendTag(ev, 2, wireVarint), uint64(firstStep))
	ev = appendBytes(ev, 7, appendVarint(appendTag(nil, 1, wireVarint), 1))
	if err := w.write(ev); err != nil {
		return nil, err
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Scalars writes one event holding the values of step, at wall time t. TensorBoard stores
// scalars as float32.
func (w *Writer) Scalars(step int64, t time.Time, values ...Scalar) error {
	var summary []byte
	for _, v := range values {
		value := appendBytes(nil, 1, []byte(v.Tag))
		value = appendTag(value, 2, wireFixed32)
		value = binary.LittleEndian.AppendUint32(value, math.Float32bits(float32(v.Value)))
		summary = appendBytes(summary, 1, value)
	}
	ev := appendDouble(nil, 1, seconds(t))
	ev = appendVarint(appendTag(ev, 2, wireVarint), uint64(step))
	ev = appendBytes(ev, 5, summary)
	return w.write(ev)
}

// Flush makes what was written durable: it syncs a local file and writes a remote one whole.
func (w *Writer) Flush(ctx context.Context) error {
	if w.file != nil {
		if err := w.file.Sync(); err != nil {
			return fmt.Errorf("syncing TensorBoard event file %s: %w", w.path, err)
		}
		return nil
	}
	return storage.WriteFile(ctx, w.path, w.data)
}

// Close flushes and closes the file.
func (w *Writer) Close(ctx context.Context) error {
	err := w.Flush(ctx)
	if w.file != nil {
		if cerr := w.file.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing TensorBoard event file %s: %w", w.path, cerr)
		}
		w.file = nil
	}
	return err
}

func (w *Writer) write(event []byte) error {
	rec := AppendRecord(nil, event)
	if w.file == nil {
		w.data = append(w.data, rec...)
		return nil
	}
	if _, err := w.file.Write(rec); err != nil {
		return fmt.Errorf("writing TensorBoard event file %s: %w", w.path, err)
	}
	return nil
}

// seconds is t in Unix seconds; whole and fractional parts apart, so whole seconds stay exact.
func seconds(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's checksum: CRC-32C, rotated right by 15 bits, plus a constant
// (a CRC of data that holds CRCs is then not trivially related to theirs).
func MaskedCRC(data []byte) uint32 {
	crc := crc32.Checksum(data, castagnoli)
	return (crc>>15 | crc<<17) + 0xa282ead8
}

// AppendRecord appends data to b in TFRecord framing: the length as a little-endian uint64,
// its masked CRC, the data, the data's masked CRC.
func AppendRecord(b, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	b = append(b, n[:]...)
	b = binary.LittleEndian.AppendUint32(b, MaskedCRC(n[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, MaskedCRC(data))
}

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendTag(b []byte, field, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendDouble(b []byte, field int, v float64) []byte {
	b = appendTag(b, field, wireFixed64)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}
