package pipelines

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"maps"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// The elements between the steps are Go structs that Beam encodes with schema row coders
// (inferred from their exported fields when the types are registered).
func init() {
	registerElement[unitTask]()
	registerElement[unitStats]()
	registerElement[refBatch]()
	registerElement[shards.DeadLetter]()
	register.DoFn6x1[context.Context, int, func(*unitTask) bool, func(int, refBatch), func(shards.DeadLetter), func(unitStats), error](&readUnitsFn{})
	register.Function1x2(keyByUnit)
	register.Emitter2[int, unitTask]()
	register.Emitter2[int, refBatch]()
	register.Emitter1[shards.DeadLetter]()
	register.Emitter1[unitStats]()
	register.Iter1[unitTask]()
}

var (
	recordsRead = beam.NewCounter(MetricsNamespace, MetricRecordsRead)
	deadLetters = beam.NewCounter(MetricsNamespace, MetricDeadLetters)
)

// unitTask is one element of ReadUnits: a unit of the plan and its place in it.
type unitTask struct {
	Seq  int
	Unit datasets.Unit
}

// unitStats is what ReadUnits reports about a unit once it has read it whole.
type unitStats struct {
	Seq     int
	Records int64  // records emitted as references
	Bad     int64  // records reported as dead letters
	Digest  string // sha256 of the unit's records (see recordDigest)
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
// is prepared. The references are stored flat, a column per field of ref (reference i is
// Order[i], Unit[i]...): Beam's row coder encodes a slice of numbers several times faster
// than a slice of structs.
type refBatch struct {
	Order []uint64
	Unit  []int32
	Index []int64
	CRC   []uint32
	Ref   []string
	// Config is the shards' configuration, in PrepareOutput's batch only.
	Config *shards.Config
}

// add appends a reference to the batch.
func (b *refBatch) add(r ref) {
	b.Order = append(b.Order, r.Order)
	b.Unit = append(b.Unit, r.Unit)
	b.Index = append(b.Index, r.Index)
	b.CRC = append(b.CRC, r.CRC)
	b.Ref = append(b.Ref, r.Ref)
}

// len is the number of references in the batch.
func (b *refBatch) len() int { return len(b.Order) }

// appendRefs appends the batch's references to refs, and reports columns of unequal length.
func (b *refBatch) appendRefs(refs []ref) ([]ref, error) {
	n := len(b.Order)
	if len(b.Unit) != n || len(b.Index) != n || len(b.CRC) != n || len(b.Ref) != n {
		return refs, fmt.Errorf("a batch of record references with columns of %d, %d, %d, %d and %d values",
			n, len(b.Unit), len(b.Index), len(b.CRC), len(b.Ref))
	}
	for i := range n {
		refs = append(refs, ref{Order: b.Order[i], Unit: b.Unit[i], Index: b.Index[i], CRC: b.CRC[i], Ref: b.Ref[i]})
	}
	return refs, nil
}

// maxBatchRefs bounds a batch, so that a unit of many passes does not hold all its
// references in memory before emitting them.
const maxBatchRefs = 4096

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
// shard (pass × Parts + part) that will hold the record in that pass; dead letters; and one
// unitStats per unit. It writes nothing, so a retried bundle does no harm, and its output
// is a pure function of the input's bytes.
type readUnitsFn struct {
	Seed       uint64
	Passes     int
	Parts      int
	ProgressID string

	progress *Progress
}

func (f *readUnitsFn) Setup() { f.progress = lookupProgress(f.ProgressID) }

// keyByUnit keys a unit of work by its number.
func keyByUnit(task unitTask) (int, unitTask) { return task.Seq, task }

func (f *readUnitsFn) ProcessElement(ctx context.Context, _ int, tasks func(*unitTask) bool, emitRefs func(int, refBatch),
	emitDead func(shards.DeadLetter), emitStats func(unitStats)) error {
	var task unitTask
	for tasks(&task) {
		if err := f.readUnit(ctx, task, emitRefs, emitDead, emitStats); err != nil {
			return err
		}
	}
	return nil
}

func (f *readUnitsFn) readUnit(ctx context.Context, t unitTask, emitRefs func(int, refBatch),
	emitDead func(shards.DeadLetter), emitStats func(unitStats)) error {
	u := t.Unit
	digest := sha256.New()
	batches := map[int]*refBatch{}
	var read int64
	st, err := datasets.Read(ctx, u, func(r datasets.Record) error {
		recordDigest(digest, &r)
		rf := ref{Unit: int32(t.Seq), Index: r.Index, CRC: recordCRC(&r), Ref: r.Ref}
		part, order := shards.Place(f.Seed, r.Key, f.Parts)
		rf.Order = order
		for pass := range f.Passes {
			shard := pass*f.Parts + part
			b := batches[shard]
			if b == nil {
				b = &refBatch{}
				batches[shard] = b
			}
			if b.add(rf); b.len() == maxBatchRefs {
				emitRefs(shard, *b)
				*b = refBatch{}
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
		emitDead(deadLetterOf(b))
		deadLetters.Inc(ctx, 1)
		f.progress.addRead(1)
		return nil
	})
	recordsRead.Inc(ctx, read%256)
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	for _, shard := range slices.Sorted(maps.Keys(batches)) {
		if b := batches[shard]; b.len() > 0 {
			emitRefs(shard, *b)
		}
	}
	emitStats(unitStats{Seq: t.Seq, Records: st.Records, Bad: st.Bad, Digest: hex.EncodeToString(digest.Sum(nil))})
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
