// Package storage is the one storage layer of the toolkit: every path, local, on Google
// Cloud Storage (gs://bucket/...) or in memory (memfs://..., for tests), is read, written,
// listed and removed through it, on Beam's io/filesystem (one GCS client per process), so
// the pipelines, the trainer's checkpoints and logs and the reports handle them the same way.
//
// Writes are atomic: Create and WriteFile (and Writer, for data pushed over time, with Commit
// and Abort) write a local file under a temporary name holding TempMarker, sync it and
// rename it, and make a GCS object visible only when its upload completes; a failed or
// aborted write leaves nothing under the final name. RemoveTemporaries deletes what a killed
// process left. SaveJSON and LoadJSON write and read JSON results (unknown fields refused).
package storage
