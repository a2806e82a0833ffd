// Package storage is the one storage layer of the toolkit: every path, local, on Google
// Cloud Storage (gs://bucket/...) or in memory (memfs://..., for tests), is read, written,
// listed and removed through it, so the pipelines, the trainer's checkpoints and logs and
// the reports handle them the same way.
//
// Remote storage fails fast: an operation on gs:// that makes no progress for Wait (30 s by
// default; SetWait, or DCL_STORAGE_TIMEOUT in the environment) gives up with an *Error, one
// line naming the path, the endpoint and the cause; each retry before that is logged, in one
// line, at warning level. Time spent by the caller between reads or writes does not count.
// Local failures are worded "OP PATH: cause"; a missing file is fs.ErrNotExist on every
// store.
//
// Writes are atomic: Create and WriteFile (and Writer, for data pushed over time, with Commit
// and Abort) write a local file under a temporary name holding TempMarker, sync it and
// rename it, and make a GCS object visible only when its upload completes; a failed or
// aborted write leaves nothing under the final name. RemoveTemporaries deletes what a killed
// process left. Globs (List) match alike on every store, as Beam's gcs filesystem matches
// them. SaveJSON and LoadJSON write and read JSON results (unknown fields refused).
//
// Locks live with the data: TryLock takes the lock of a path in a lock file beside it
// (LockFile), a flock on local files and an object created under a generation precondition
// on gs://, so that every writer of one path meets the same lock wherever it runs. Listings
// leave lock files out.
//
// # Drivers
//
// Each store is a driver (driver.go): local files, GCS through cloud.google.com/go/storage,
// and an in-memory object store. The scheme of a path picks its driver in one place, the
// drivers map; everything the stores share is written once above them: the stall watch and the
// wording of errors (op.go), glob matching and the rules of listings (temporaries left out,
// folders' placeholders skipped), the atomic Create over a driver's writer (commit or abort),
// and the path syntax a store declares. The conformance suite (conformance_test.go) runs on
// every driver, the GCS one against an emulator on loopback.
//
// The shape follows the two anchors. Like Beam's io/filesystem, a scheme names a store in one
// registry; unlike it, the registry is closed (three entries, no init-time Register that
// panics on a second import) and holds drivers rather than constructors, since a driver keeps
// no state per call (the GCS client is one per process). Like gocloud's blob/driver, a driver
// is small and unexported, the portable behaviour lives in the package above it, a write is a
// writer that is committed or aborted (aborting a GCS upload is cancelling its context), and
// one suite proves every driver (drivertest). gocloud.dev itself is not used: its fileblob by
// default writes attribute side files (NAME.attrs) next to the data and names and places
// temporaries its own way, its buckets hold flat keys where the toolkit's local paths are OS
// paths (Clean resolves their links), it has no globs and no stall bound, and its GCS driver
// would stand between this package and the client's retry hooks (WithErrorFunc) that give
// the one-line retry logs and the stall error.
// What it would save is the three drivers here (a few hundred lines), at the price of a large
// dependency and those differences.
//
// Beam's own filesystems are not used either: Beam's gcs one makes a client per call and
// retries silently until its context ends, and its memfs lists by filepath.Match (one level
// only) and turns the rename of a missing file into an empty file; the memory driver here is
// an object store like GCS, so a test on memfs:// meets what matters on gs:// without a
// server.
package storage
