// Package shards owns the on-disk dataset format: Parquet shards of augmented view pairs,
// their schema, writer and streaming reader, the manifest that makes a directory a complete
// dataset, verification, and atomic commit. Every path in the toolkit, local, gs:// or
// in-memory (memfs://), goes through this package's filesystem layer, built on Beam's
// io/filesystem, so the pipelines and the trainer read and write them the same way.
package shards
