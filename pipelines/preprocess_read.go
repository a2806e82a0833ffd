package pipelines

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"reflect"
	"regexp"
	"strconv"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

func init() {
	beam.RegisterCoder(reflect.TypeOf(ref{}), encodeRef, decodeRef)
	register.DoFn5x1[context.Context, string, func(int, ref), func(string), func(string), error](&readUnitsFn{})
	register.DoFn2x0[[]byte, func(int, ref)](&partMarkersFn{})
	register.Emitter2[int, ref]()
	register.Emitter1[string]()
}

var (
	recordsRead = beam.NewCounter(MetricsNamespace, MetricRecordsRead)
	deadLetters = beam.NewCounter(MetricsNamespace, MetricDeadLetters)
)

// unitTask is one element of ReadUnits: a unit of the plan and its place in it.
type unitTask struct {
	Seq  int           `json:"seq"`
	Unit datasets.Unit `json:"unit"`
}

// unitStats is what ReadUnits reports about a unit once it has read it whole.
type unitStats struct {
	Seq     int    `json:"seq"`
	Records int64  `json:"records"` // records emitted as references
	Bad     int64  `json:"bad"`     // records reported as dead letters
	Digest  string `json:"digest"`  // sha256 of the unit's records (see recordDigest)
}

// ref is how a record travels through the GroupByKey: where to find it again and where it
// goes, never its pixels. Records of fixed-size formats (CIFAR, STL-10, IDX) are found by
// their unit and index, and their key and label are read again with them; records of
// image files and tars carry their key, label, file and byte range.
type ref struct {
	Order uint64 // the row's place in its shard (shards.Place)
	Unit  int32  // the plan unit it was read from; markerUnit for a part marker
	Index int64  // datasets.Record.Index
	CRC   uint32 // CRC-32C of the record's bytes (and label), to notice a source that changed

	Key    string // image files and tars only
	Label  int32  // image files and tars only
	Source string // image files and tars only: the file, or the tar
	Offset int64  // tars only: the member's data offset in Source
	Length int64  // image files and tars only: the encoded image's size
}

// markerUnit marks the reference that PartMarkers sends to every shard, so that every part
// of every pass is written, even one no record falls into.
const markerUnit = -1

func encodeRef(r ref) []byte {
	b := make([]byte, 0, 32+len(r.Key)+len(r.Source))
	b = binary.AppendUvarint(b, r.Order)
	b = binary.AppendVarint(b, int64(r.Unit))
	b = binary.AppendVarint(b, r.Index)
	b = binary.AppendUvarint(b, uint64(r.CRC))
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendVarint(b, int64(r.Label))
	b = binary.AppendUvarint(b, uint64(len(r.Source)))
	b = append(b, r.Source...)
	b = binary.AppendVarint(b, r.Offset)
	return binary.AppendVarint(b, r.Length)
}

func decodeRef(b []byte) (ref, error) {
	d := refDecoder{b: b}
	r := ref{
		Order: d.uvarint(), Unit: int32(d.varint()), Index: d.varint(), CRC: uint32(d.uvarint()),
		Key: d.str(), Label: int32(d.varint()), Source: d.str(), Offset: d.varint(), Length: d.varint(),
	}
	if d.err != nil || len(d.b) != 0 {
		return ref{}, fmt.Errorf("decoding a record reference: %v (%d bytes left)", d.err, len(d.b))
	}
	return r, nil
}

type refDecoder struct {
	b   []byte
	err error
}

func (d *refDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *refDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *refDecoder) str() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errors.New("truncated")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordCRC is the CRC-32C of a record's bytes and label: WriteParts compares it with the
// bytes it reads again.
func recordCRC(r *datasets.Record) uint32 {
	data := r.Encoded
	if data == nil {
		data = r.Pixels.Pix
	}
	var label [4]byte
	binary.LittleEndian.PutUint32(label[:], uint32(int32(r.Label)))
	return crc32.Update(crc32.Checksum(data, castagnoli), castagnoli, label[:])
}

// recordDigest adds a record to its unit's digest: key, index, label, size and bytes, each
// length-prefixed so that no two different records hash alike.
func recordDigest(h hash.Hash, r *datasets.Record) {
	data := r.Encoded
	if data == nil {
		data = r.Pixels.Pix
	}
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendVarint(b, r.Index)
	b = binary.AppendVarint(b, int64(r.Label))
	b = binary.AppendVarint(b, int64(r.Height))
	b = binary.AppendVarint(b, int64(r.Width))
	b = binary.AppendUvarint(b, uint64(len(data)))
	h.Write(b)
	h.Write(data)
}

// readUnitsFn reads units and emits, for every record and pass, a reference keyed by the
// shard (pass × Parts + part) that will hold the record in that pass; dead letters as JSON
// shards.DeadLetter; and one unitStats per unit. It writes nothing, so a retried bundle
// does no harm, and its output is a pure function of the input's bytes.
type readUnitsFn struct {
	Seed       uint64
	Passes     int
	Parts      int
	ProgressID string

	progress *Progress
}

func (f *readUnitsFn) Setup() { f.progress = lookupProgress(f.ProgressID) }

func (f *readUnitsFn) ProcessElement(ctx context.Context, task string, emitRef func(int, ref), emitDead func(string), emitStats func(string)) error {
	var t unitTask
	if err := json.Unmarshal([]byte(task), &t); err != nil {
		return fmt.Errorf("decoding a unit of work: %w", err)
	}
	u := t.Unit
	encoded := u.Kind == datasets.KindClassFolder || u.Kind == datasets.KindFiles || u.Kind == datasets.KindTar
	digest := sha256.New()
	var read int64
	st, err := datasets.Read(ctx, u, func(r datasets.Record) error {
		recordDigest(digest, &r)
		rf := ref{Unit: int32(t.Seq), Index: r.Index, CRC: recordCRC(&r)}
		if encoded {
			rf.Key, rf.Label, rf.Source, rf.Length = r.Key, int32(r.Label), r.Source, int64(len(r.Encoded))
			if u.Kind == datasets.KindTar {
				rf.Offset = r.Offset
			}
		}
		for pass := range f.Passes {
			part, order := shards.Place(f.Seed, pass, r.Key, f.Parts)
			rf.Order = order
			emitRef(pass*f.Parts+part, rf)
		}
		read++
		if read%256 == 0 {
			recordsRead.Inc(ctx, 256)
		}
		f.progress.addRead(1)
		return nil
	}, func(b datasets.BadRecord) error {
		fmt.Fprintf(digest, "bad %q %q %q %q\n", b.Source, b.Position, b.Key, b.Reason)
		js, err := json.Marshal(deadLetterOf(b))
		if err != nil {
			return err
		}
		emitDead(string(js))
		deadLetters.Inc(ctx, 1)
		f.progress.addRead(1)
		return nil
	})
	recordsRead.Inc(ctx, read%256)
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	js, err := json.Marshal(unitStats{Seq: t.Seq, Records: st.Records, Bad: st.Bad, Digest: hex.EncodeToString(digest.Sum(nil))})
	if err != nil {
		return err
	}
	emitStats(string(js))
	return nil
}

var (
	lastNumber   = regexp.MustCompile(`(\d+)\)?$`)
	bytePosition = regexp.MustCompile(`^byte \d+$`)
)

// deadLetterOf turns a reader's bad record into a dead letter. The reader says where the
// record lies in words ("byte 3073", "member n01/x.JPEG (data at byte 1536)"): the number
// becomes the position, and a tar member's name goes into the reason.
func deadLetterOf(b datasets.BadRecord) shards.DeadLetter {
	d := shards.DeadLetter{Source: b.Source, Key: b.Key, Reason: b.Reason}
	if m := lastNumber.FindStringSubmatch(b.Position); m != nil {
		d.Position, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if b.Position != "" && !bytePosition.MatchString(b.Position) {
		d.Reason = b.Position + ": " + b.Reason
	}
	return d
}

// partMarkersFn sends a marker reference to every shard, so that a shard no record falls
// into is still written (empty): a dataset always has every part of every pass.
type partMarkersFn struct {
	Shards int
}

func (f *partMarkersFn) ProcessElement(_ []byte, emit func(int, ref)) {
	for s := range f.Shards {
		emit(s, ref{Unit: markerUnit})
	}
}
