// Package shards owns the on-disk dataset format: Parquet shards of augmented view pairs,
// their schema, writer and streaming reader, the manifest that makes a directory a complete
// dataset, verification and atomic commit (StagedCommit, which the embeddings package
// shares). Its files go through the storage layer (internal/storage), like every path in the
// toolkit.
//
// # Layout of a dataset directory
//
//	DIR/manifest.json                            written last; without it DIR is not data
//	DIR/pass-000/part-00000-of-00064.parquet     pass 0, part 0 of 64 (ShardID.Path)
//	DIR/pass-000/part-00001-of-00064.parquet
//	…
//	DIR/pass-004/part-00063-of-00064.parquet     E passes × K parts, every one present
//	DIR/dead-letters.jsonl                       records that gave no rows (WriteDeadLetters)
//
// Each pass is a folder, so one pass can be listed, copied or deleted alone. Every part of
// every pass exists, even with no rows, so a missing file is always an error. Row schema
// (Row): key, source_index, label (-1 unlabelled), pass, view1, view2 (empty for
// single-view evaluation shards), height, width, channels, encoding (raw = uint8 HWC, png,
// jpeg at quality 95). Each footer holds the whole run Config as JSON (ConfigKey) and
// readable copies of its main fields (dcl.dataset, dcl.seed, …, dcl.augment).
//
// # Writing (the preprocess pipeline)
//
//  1. Before any shard: Prepare(ctx, dir, cfg, overwrite) refuses a directory that holds
//     another dataset (*DifferentDatasetError, unless overwrite), then removes the
//     manifest, old shards and temporaries, so a re-run starts clean.
//  2. Inside the DoFn that makes part p of pass e: NewWriter(ctx, dir, ShardID{e, p, K},
//     cfg, WriterOptions{}), then WriteViews (encodes transforms.Image views) or Write
//     (already encoded), then Close, which commits atomically and returns the shard's
//     ShardInfo (rows, bytes, sha256, label histogram, row groups). Call Abort in a defer:
//     on an error or a cancelled context nothing appears under the shard's name. Use
//     Place(seed, pass, key, K) to choose each record's part and its order within the part,
//     and write a part's rows in that order: row groups are then random samples, which the
//     shuffled reader relies on, and the bytes are the same on every run.
//  3. The metadata-only last step: WriteDeadLetters(ctx, dir, letters) if any, then
//     Commit(ctx, dir, cfg, infos, records, deadLetters)
//     checks the shards are staged, removes files the run did not write, writes
//     manifest.json (the commit record) and moves the shards into place. Records in = rows
//     per pass + dead letters, or Commit refuses.
//
// Writers are deterministic: no time stamps, a fixed CreatedBy, sorted footer keys, row
// groups cut by byte counts (WriterOptions, default 4 MiB of views; batches of 1 MiB go to
// parquet-go per Write call, which is where it cuts pages). The same rows in the same order
// give the same bytes. Image columns carry no statistics, bounds or bloom filters. A
// writer's memory is about one row group, whatever the shard's size.
//
// # Reading
//
// NewReader(ctx, dir, ReaderOptions{BatchSize, Seed, Epoch, Start, …}) streams epoch Epoch
// (pass Epoch mod E) in a shuffled order that is a pure function of the manifest, Seed,
// Epoch and Window: it permutes the pass's row groups, reads them Window at a time and
// permutes the rows inside each window (see Reader). Batches hold keys, source indices,
// labels, passes and the decoded views as flat uint8 HWC buffers (Batch.View1, View2;
// Batch.Image gives a transforms.Image). Batch.End() is the position to store in a
// checkpoint; a reader started at Start = that position returns exactly the rows an
// uninterrupted reader would have. The last short batch is dropped unless KeepPartial.
// NewSequentialReader reads every row in manifest order, for evaluation. Both refuse a
// directory without a manifest (ErrNoManifest) and a shard whose footer disagrees with it.
//
// Verify(ctx, dir) re-reads every shard against the manifest (size, sha256, provenance,
// row groups, rows, labels, each view's size) and lists the problems; `dcl shards verify`
// prints its Summary. Inspect writes view pairs as PNG files for a person to look at.
//
// # Embedding files
//
// The evaluations' embedding files are a second format, with its own package
// (shards/embeddings); it commits its directories with this package's StagedCommit, the
// sequence Commit runs.
package shards
