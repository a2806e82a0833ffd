// Package datasets reads image datasets in their published on-disk formats, local or on
// gs://, as a stream of records, split into independent units of work that a Beam pipeline
// can spread over its workers. It is pure Go, with no Beam; every read goes through the
// storage layer (internal/storage).
//
// Formats: each file registers the datasets of one family of formats (fixed.go: fixed-size
// binary records, CIFAR and STL-10; imagenet.go: ILSVRC-2012 folders and tars, read in place;
// folder.go: a folder of class subfolders of JPEG and PNG files; idx.go: MNIST-style IDX
// files, gzipped or not). Names lists the datasets, and `dcl preprocess -h` names them.
//
// Use:
//
//	plan, err := datasets.MakePlan(ctx, datasets.Spec{Dataset: "cifar10", Input: dir, Split: "train"})
//	// plan.Units are independent and JSON-friendly; plan.Records sizes a progress bar.
//	for _, u := range plan.Units { // or one unit per Beam element
//		st, err := datasets.Read(ctx, u, func(r datasets.Record) error {
//			img, err := r.Image(datasets.Limits{}) // decodes JPEG/PNG, refusing absurd sizes
//			if err != nil {
//				return writeDeadLetter(r.Bad(err))
//			}
//			...
//		}, writeDeadLetter)
//	}
//
// # The dataset registry
//
// Every dataset is one Descriptor (registry.go): its name, what its input may be, splits,
// class names, published record counts, default view size, channels, per-channel mean and
// standard deviation and augmentation preset, and the function that plans its units.
// Preprocessing, the trainer's input normalisation, reproduce's config checks and the command
// line's help read it; a name missing from it is an error everywhere. Adding a dataset is one
// file:
//
//	func init() {
//		datasets.Register(datasets.Descriptor{
//			Name: "svhn", Summary: "SVHN cropped digits (.mat)", Input: "the folder of {train,test}_32x32.mat",
//			Splits: []string{"train", "test"}, Classes: ..., Published: map[string]int64{"train": 73257, "test": 26032},
//			ViewSize: 32, Channels: 3, Mean: ..., Std: ..., Augment: "simclr-cifar",
//			Plan: planSVHN, // units of an existing kind, or of a kind of its own:
//		})
//		datasets.RegisterKind("svhn-mat", datasets.Kind{Read: readSVHN, Fetch: fetchSVHN})
//	}
//
// A unit Kind reads its units' records and fetches a record again by the reference
// (Record.Ref) its reader gave it: a byte range, a tar member, a file's path, whatever the
// format needs. A pipeline carries references, not pixels, from where it reads records to
// where it writes them, and never looks into them (see Fetcher); pipelines/
// preprocess_toy_test.go adds such a dataset in one file and preprocesses it.
//
// Nothing is dropped silently: every record a unit holds is emitted or reported as a
// BadRecord (with its file, Position and reason), so records in = records out + bad
// records. Input that cannot be read as a whole (a missing or truncated file, files that
// disagree, an archive entry that escapes its folder) is an error naming the file.
//
// Decoded records (CIFAR, STL-10, IDX) carry their pixels in Record.Pixels; JPEG and PNG
// records carry the file's bytes in Record.Encoded, with the header already checked, so
// that decoding (the costly part) happens in the step that augments.
package datasets
