// Package pipelines builds the toolkit's Apache Beam jobs: preprocess (datasets to augmented
// Parquet shards) and the evaluations. Each job is a constructor that takes a
// beam.Scope and its configuration, wires readers and augmentations from transforms, the
// shard format from shards and the math from analysis, and can be tested with ptest on prism.
// No image bytes ever pass through a GroupByKey: shards are written inside the DoFns that
// produce them and committed by a small metadata-only step.
//
// The evaluations are registered (RegisterEvaluation, evaluations.go; Evaluations lists
// them): each declares its parameters once, and `dcl` builds its command from the
// registration and a reproduction runs the ones its config asks for (evaluate.NAME).
package pipelines
