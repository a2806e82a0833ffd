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
	"maps"
	"reflect"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

func init() {
	beam.RegisterCoder(reflect.TypeOf(refBatch{}), encodeRefBatch, decodeRefBatch)
	register.DoFn6x1[context.Context, int, func(*string) bool, func(int, refBatch), func(string), func(string), error](&readUnitsFn{})
	register.Function1x2(keyByUnit)
	register.Emitter2[int, refBatch]()
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
// goes, never its pixels. Its unit's kind finds it again (datasets.Fetcher) by the unit, the
// index and the reference the kind's reader gave it, which the pipeline does not look into.
type ref struct {
	Order uint64 // the row's place in its shard (shards.Place)
	Unit  int32  // the plan unit it was read from
	Index int64  // datasets.Record.Index
	CRC   uint32 // CRC-32C of the record's bytes (and label), to notice a source that changed
	Ref   string // datasets.Record.Ref
}

func (r ref) fetchRef() datasets.Ref {
	return datasets.Ref{Unit: int(r.Unit), Index: r.Index, Ref: r.Ref}
}

// refBatch is what goes through the GroupByKey to a shard: from ReadUnits, the references
// of one unit's records that go to that shard (batched because prism's cost is per
// element: a reference per element made the GroupByKey cost more than reading CIFAR); from
// PrepareOutput, one batch per shard with no references and the shards' configuration, so
// that every shard is written, even one no record falls into, and only after the output
// is prepared.
type refBatch struct {
	Refs   []ref
	Config string // shards.Config as JSON, in PrepareOutput's batch only
}

// maxBatchRefs bounds a batch, so that a unit of many passes does not hold all its
// references in memory before emitting them.
const maxBatchRefs = 4096

func appendRef(b []byte, r ref) []byte {
	b = binary.AppendUvarint(b, r.Order)
	b = binary.AppendVarint(b, int64(r.Unit))
	b = binary.AppendVarint(b, r.Index)
	b = binary.AppendUvarint(b, uint64(r.CRC))
	b = binary.AppendUvarint(b, uint64(len(r.Ref)))
	return append(b, r.Ref...)
}

func (d *refDecoder) ref() ref {
	return ref{Order: d.uvarint(), Unit: int32(d.varint()), Index: d.varint(), CRC: uint32(d.uvarint()), Ref: d.str()}
}

func encodeRefBatch(rb refBatch) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 8+24*len(rb.Refs)+len(rb.Config)), uint64(len(rb.Refs)))
	for _, r := range rb.Refs {
		b = appendRef(b, r)
	}
	b = binary.AppendUvarint(b, uint64(len(rb.Config)))
	return append(b, rb.Config...)
}

func decodeRefBatch(b []byte) (refBatch, error) {
	d := refDecoder{b: b}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(b)) { // every reference takes a byte at least
		d.err = fmt.Errorf("claims %d references in %d bytes", n, len(b))
	}
	var rb refBatch
	if d.err == nil && n > 0 {
		rb.Refs = make([]ref, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		rb.Refs = append(rb.Refs, d.ref())
	}
	rb.Config = d.str()
	if d.err != nil || len(d.b) != 0 {
		return refBatch{}, fmt.Errorf("decoding a batch of record references: %v (%d bytes left)", d.err, len(d.b))
	}
	return rb, nil
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

// keyByUnit keys a unit of work by its number.
func keyByUnit(task string) (int, string) {
	var t struct {
		Seq int `json:"seq"`
	}
	_ = json.Unmarshal([]byte(task), &t) // ReadUnits reports a task that does not decode
	return t.Seq, task
}

func (f *readUnitsFn) ProcessElement(ctx context.Context, _ int, tasks func(*string) bool, emitRefs func(int, refBatch), emitDead func(string), emitStats func(string)) error {
	var task string
	for tasks(&task) {
		if err := f.readUnit(ctx, task, emitRefs, emitDead, emitStats); err != nil {
			return err
		}
	}
	return nil
}

func (f *readUnitsFn) readUnit(ctx context.Context, task string, emitRefs func(int, refBatch), emitDead func(string), emitStats func(string)) error {
	var t unitTask
	if err := json.Unmarshal([]byte(task), &t); err != nil {
		return fmt.Errorf("decoding a unit of work: %w", err)
	}
	u := t.Unit
	digest := sha256.New()
	batches := map[int][]ref{}
	var read int64
	st, err := datasets.Read(ctx, u, func(r datasets.Record) error {
		recordDigest(digest, &r)
		rf := ref{Unit: int32(t.Seq), Index: r.Index, CRC: recordCRC(&r), Ref: r.Ref}
		part, order := shards.Place(f.Seed, r.Key, f.Parts)
		rf.Order = order
		for pass := range f.Passes {
			shard := pass*f.Parts + part
			batches[shard] = append(batches[shard], rf)
			if len(batches[shard]) == maxBatchRefs {
				emitRefs(shard, refBatch{Refs: batches[shard]})
				batches[shard] = nil
			}
		}
		read++
		if read%256 == 0 {
			recordsRead.Inc(ctx, 256)
		}
		f.progress.addRead(1)
		return nil
	}, func(b datasets.BadRecord) error {
		fmt.Fprintf(digest, "bad %q %q %q %q\n", b.Source, b.Position.String(), b.Key, b.Reason)
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
	for _, shard := range slices.Sorted(maps.Keys(batches)) {
		if refs := batches[shard]; len(refs) > 0 {
			emitRefs(shard, refBatch{Refs: refs})
		}
	}
	js, err := json.Marshal(unitStats{Seq: t.Seq, Records: st.Records, Bad: st.Bad, Digest: hex.EncodeToString(digest.Sum(nil))})
	if err != nil {
		return err
	}
	emitStats(string(js))
	return nil
}

// deadLetterOf turns a reader's bad record into a dead letter: the offset becomes the
// position, and a tar member's place goes into the reason.
func deadLetterOf(b datasets.BadRecord) shards.DeadLetter {
	d := shards.DeadLetter{Source: b.Source, Position: b.Position.Offset, Key: b.Key, Reason: b.Reason}
	if b.Position.Member != "" {
		d.Reason = b.Position.String() + ": " + b.Reason
	}
	return d
}
