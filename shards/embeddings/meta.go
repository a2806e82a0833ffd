package embeddings

import (
	"fmt"
	"slices"
	"strconv"
)

// Meta keys of an embeddings manifest (and, prefixed with FooterPrefix, of each embedding
// file's footer) that `dcl embed` writes and the evaluations read back; ClassesKey is one
// more.
const (
	MetaDataset    = "dataset"    // the shards' dataset, for its class count
	MetaSplit      = "split"      // the shards' split
	MetaFeature    = "feature"    // backbone or projection
	MetaViews      = "views"      // "2": each row is view 1's vector followed by view 2's
	MetaCheckpoint = "checkpoint" // the encoder's checkpoint
	// MetaTemperature is the loss temperature the encoder was trained with.
	MetaTemperature = "temperature"
	// MetaBackend is the compute backend that ran the encoder (cpu or cuda), and
	// MetaCodeVersion the version of the program (dcl embed's).
	MetaBackend     = "backend"
	MetaCodeVersion = "code_version"
	// MetaArithmetic is the arithmetic the encoder computed in (float32 or tf32:
	// trainstep.EncoderArithmetic).
	MetaArithmetic = "arithmetic"
)

// ClassList is the class list an embedding set carries (Reader.Classes; nil for none), with
// the set's path for errors.
type ClassList struct {
	Path    string
	Classes []string
}

// SameClasses returns the class list the sets carry, refusing two that differ (the same
// label naming two classes); nil when none carries one (files of other tools, or of datasets
// without class names).
func SameClasses(sets ...ClassList) ([]string, error) {
	var first *ClassList
	for i := range sets {
		s := &sets[i]
		if len(s.Classes) == 0 {
			continue
		}
		if first == nil {
			first = s
			continue
		}
		if slices.Equal(first.Classes, s.Classes) {
			continue
		}
		a, b := first.Classes, s.Classes
		for i := range max(len(a), len(b)) {
			name := func(c []string) string {
				if i < len(c) {
					return strconv.Quote(c[i])
				}
				return "none"
			}
			if i >= len(a) || i >= len(b) || a[i] != b[i] {
				return nil, fmt.Errorf("%s and %s were embedded from datasets whose class lists differ (%d and %d classes; label %d is %s in one, %s in the other): their labels do not mean the same classes",
					first.Path, s.Path, len(a), len(b), i, name(a), name(b))
			}
		}
	}
	if first == nil {
		return nil, nil
	}
	return first.Classes, nil
}
