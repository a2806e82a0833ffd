// Package embeddings owns the evaluations' embedding files, the second file format of the
// toolkit beside the dataset shards (package shards): Parquet files of one row per image, id
// (int64), label (int32), embedding (a Parquet LIST of float32, as pyarrow and pandas write a
// list column, every row of the footer's dimension), key (the example's key in the shards),
// split and class (the label's class name), written by `dcl embed` and read by the
// evaluations. Files of earlier versions, without the last three, read as before.
//
// NewWriter writes one file atomically; a sharded directory holds FileName(part, parts)
// files, staged while they are written (PartPath), and embeddings.json, its manifest, which
// Commit writes before it moves the files into place (shards.StagedCommit, the sequence the
// shards' Commit runs). Each file's footer records the dimension and, under FooterPrefix, the
// manifest's metadata (ClassesKey: the class list), so that a single file says what a
// directory's manifest says.
//
// Open streams a file or such a directory in blocks (Block: IDs, Labels, Vectors row-major)
// with bounded memory, through parquet-go's generic reader, and accepts the layouts other
// tools write (pyarrow, DuckDB, arrow-rs: list/element or list/item, optional columns, int64
// labels or ids, double values, legacy 2-level lists, a bare repeated column).
package embeddings
