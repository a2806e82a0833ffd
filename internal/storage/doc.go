// Package storage is the one storage layer of the toolkit: every path, local, on Google
// Cloud Storage (gs://bucket/...) or in memory (memfs://..., for tests), is read, written,
// listed and removed through it, so the pipelines, the trainer's checkpoints and logs and
// the reports handle them the same way. Local and memfs:// paths go through Beam's
// io/filesystem; gs:// paths through cloud.google.com/go/storage (one client per process).
//
// Remote storage fails fast: an operation on gs:// that makes no progress for Wait (30 s by
// default; SetWait, or DCL_STORAGE_TIMEOUT in the environment) gives up with an *Error, one
// line naming the path, the endpoint and the cause; each retry before that is logged, in one
// line, at warning level. Time spent by the caller between reads or writes does not count.
//
// Writes are atomic: Create and WriteFile (and Writer, for data pushed over time, with Commit
// and Abort) write a local file under a temporary name holding TempMarker, sync it and
// rename it, and make a GCS object visible only when its upload completes; a failed or
// aborted write leaves nothing under the final name. RemoveTemporaries deletes what a killed
// process left. SaveJSON and LoadJSON write and read JSON results (unknown fields refused).
package storage
