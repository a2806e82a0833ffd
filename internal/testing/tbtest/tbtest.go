// Package tbtest reads TensorBoard event files for tests. Its decoder is written from the
// format's specification (TFRecord framing, event.proto and summary.proto) and shares no code
// with the writer, so that a test of one against the other checks the format, not itself.
package tbtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Event is a decoded Event proto, with the fields the writer may set.
type Event struct {
	WallTime    float64
	Step        int64
	FileVersion string
	// Scalars maps tag to simple_value, in the order of the summary's values.
	Scalars map[string]float32
	Tags    []string
	// SessionStatus is session_log.status (0: no session log).
	SessionStatus int
}

func masked(data []byte) uint32 {
	crc := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8
}

// Records splits a TFRecord file into its records, checking both masked CRC-32Cs of each.
func Records(data []byte) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			return nil, fmt.Errorf("record at %d: %d bytes left, a header takes 12", off, len(data)-off)
		}
		n := binary.LittleEndian.Uint64(data[off:])
		if got, want := binary.LittleEndian.Uint32(data[off+8:]), masked(data[off:off+8]); got != want {
			return nil, fmt.Errorf("record at %d: length CRC %08x, want %08x", off, got, want)
		}
		start := off + 12
		if uint64(len(data)-start) < n+4 {
			return nil, fmt.Errorf("record at %d: length %d runs past the end", off, n)
		}
		body := data[start : start+int(n)]
		if got, want := binary.LittleEndian.Uint32(data[start+int(n):]), masked(body); got != want {
			return nil, fmt.Errorf("record at %d: data CRC %08x, want %08x", off, got, want)
		}
		out = append(out, body)
		off = start + int(n) + 4
	}
	return out, nil
}

// Events decodes every record of an event file.
func Events(data []byte) ([]Event, error) {
	recs, err := Records(data)
	if err != nil {
		return nil, err
	}
	events := make([]Event, 0, len(recs))
	for i, r := range recs {
		ev, err := decodeEvent(r)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		events = append(events, ev)
	}
	return events, nil
}

type field struct {
	num    int
	wire   int
	varint uint64
	bytes  []byte
}

func fields(b []byte) ([]field, error) {
	var out []field
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("bad field key")
		}
		b = b[n:]
		f := field{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.varint, n = binary.Uvarint(b)
			if n <= 0 {
				return nil, errors.New("bad varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return nil, errors.New("short fixed64")
			}
			f.varint, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			if len(b) < 4 {
				return nil, errors.New("short fixed32")
			}
			f.varint, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("bad length")
			}
			f.bytes, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return nil, fmt.Errorf("field %d: wire type %d", f.num, f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

func decodeEvent(b []byte) (Event, error) {
	fs, err := fields(b)
	if err != nil {
		return Event{}, err
	}
	var ev Event
	for _, f := range fs {
		switch {
		case f.num == 1 && f.wire == 1:
			ev.WallTime = math.Float64frombits(f.varint)
		case f.num == 2 && f.wire == 0:
			ev.Step = int64(f.varint)
		case f.num == 3 && f.wire == 2:
			ev.FileVersion = string(f.bytes)
		case f.num == 5 && f.wire == 2:
			if err := decodeSummary(f.bytes, &ev); err != nil {
				return Event{}, err
			}
		case f.num == 7 && f.wire == 2:
			sl, err := fields(f.bytes)
			if err != nil {
				return Event{}, err
			}
			for _, s := range sl {
				if s.num == 1 && s.wire == 0 {
					ev.SessionStatus = int(s.varint)
				}
			}
		default:
			return Event{}, fmt.Errorf("unexpected field %d (wire type %d)", f.num, f.wire)
		}
	}
	return ev, nil
}

func decodeSummary(b []byte, ev *Event) error {
	values, err := fields(b)
	if err != nil {
		return err
	}
	ev.Scalars = map[string]float32{}
	for _, v := range values {
		if v.num != 1 || v.wire != 2 {
			return fmt.Errorf("summary field %d (wire type %d)", v.num, v.wire)
		}
		vf, err := fields(v.bytes)
		if err != nil {
			return err
		}
		var tag string
		var val float32
		var hasVal bool
		for _, f := range vf {
			switch {
			case f.num == 1 && f.wire == 2:
				tag = string(f.bytes)
			case f.num == 2 && f.wire == 5:
				val, hasVal = math.Float32frombits(uint32(f.varint)), true
			default:
				return fmt.Errorf("summary value field %d (wire type %d)", f.num, f.wire)
			}
		}
		if tag == "" || !hasVal {
			return fmt.Errorf("summary value without tag or simple_value")
		}
		ev.Scalars[tag] = val
		ev.Tags = append(ev.Tags, tag)
	}
	return nil
}

// Point is one scalar as TensorBoard shows it.
type Point struct {
	Step  int64
	Value float32
}

// Load reads a run's event files (oldest first, as TensorBoard orders them by name) the way
// TensorBoard's loader does (event_accumulator, file_version 2): a SessionLog START drops
// the events read so far whose step is at or after the START's. ignoreFirstStart is the
// newer loader's rule (plugin_event_accumulator) that a run's first START is the session's
// start, not a restart, and purges nothing. It returns each tag's points in the order read.
func Load(files [][]Event, ignoreFirstStart bool) map[string][]Point {
	out := map[string][]Point{}
	seenStart := false
	for _, events := range files {
		for _, ev := range events {
			if ev.SessionStatus == 1 {
				if ignoreFirstStart && !seenStart {
					seenStart = true
					continue
				}
				seenStart = true
				for tag, points := range out {
					kept := points[:0]
					for _, p := range points {
						if p.Step < ev.Step {
							kept = append(kept, p)
						}
					}
					out[tag] = kept
				}
				continue
			}
			for _, tag := range ev.Tags {
				out[tag] = append(out[tag], Point{ev.Step, ev.Scalars[tag]})
			}
		}
	}
	return out
}
