package pipelines

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
)

// Beam serialises a DoFn's exported fields as JSON, which would turn each byte of a path or
// name that is not UTF-8 into U+FFFD: a worker would then open or write another path than
// the one given (a class folder not found, an output landing beside the one named). Every
// DoFn of this package therefore goes through rawname.Marshal and rawname.Unmarshal, which
// carry every string byte for byte, and checkDoFnJSON refuses a pipeline with a DoFn that
// does not.

func (f *readUnitsFn) MarshalJSON() ([]byte, error) {
	type plain readUnitsFn
	return rawname.Marshal((*plain)(f))
}
func (f *readUnitsFn) UnmarshalJSON(b []byte) error {
	type plain readUnitsFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *prepareOutputFn) MarshalJSON() ([]byte, error) {
	type plain prepareOutputFn
	return rawname.Marshal((*plain)(f))
}
func (f *prepareOutputFn) UnmarshalJSON(b []byte) error {
	type plain prepareOutputFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *writePartFn) MarshalJSON() ([]byte, error) {
	type plain writePartFn
	return rawname.Marshal((*plain)(f))
}
func (f *writePartFn) UnmarshalJSON(b []byte) error {
	type plain writePartFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *commitFn) MarshalJSON() ([]byte, error) {
	type plain commitFn
	return rawname.Marshal((*plain)(f))
}
func (f *commitFn) UnmarshalJSON(b []byte) error {
	type plain commitFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *embedRangeFn) MarshalJSON() ([]byte, error) {
	type plain embedRangeFn
	return rawname.Marshal((*plain)(f))
}
func (f *embedRangeFn) UnmarshalJSON(b []byte) error {
	type plain embedRangeFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *commitEmbeddingsFn) MarshalJSON() ([]byte, error) {
	type plain commitEmbeddingsFn
	return rawname.Marshal((*plain)(f))
}
func (f *commitEmbeddingsFn) UnmarshalJSON(b []byte) error {
	type plain commitEmbeddingsFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *readQueriesFn) MarshalJSON() ([]byte, error) {
	type plain readQueriesFn
	return rawname.Marshal((*plain)(f))
}
func (f *readQueriesFn) UnmarshalJSON(b []byte) error {
	type plain readQueriesFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *searchTileFn) MarshalJSON() ([]byte, error) {
	type plain searchTileFn
	return rawname.Marshal((*plain)(f))
}
func (f *searchTileFn) UnmarshalJSON(b []byte) error {
	type plain searchTileFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *mergeVoteFn) MarshalJSON() ([]byte, error) {
	type plain mergeVoteFn
	return rawname.Marshal((*plain)(f))
}
func (f *mergeVoteFn) UnmarshalJSON(b []byte) error {
	type plain mergeVoteFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *writeKNNResultFn) MarshalJSON() ([]byte, error) {
	type plain writeKNNResultFn
	return rawname.Marshal((*plain)(f))
}
func (f *writeKNNResultFn) UnmarshalJSON(b []byte) error {
	type plain writeKNNResultFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *trainProbeFn) MarshalJSON() ([]byte, error) {
	type plain trainProbeFn
	return rawname.Marshal((*plain)(f))
}
func (f *trainProbeFn) UnmarshalJSON(b []byte) error {
	type plain trainProbeFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *drawBatchesFn) MarshalJSON() ([]byte, error) {
	type plain drawBatchesFn
	return rawname.Marshal((*plain)(f))
}
func (f *drawBatchesFn) UnmarshalJSON(b []byte) error {
	type plain drawBatchesFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *multipliersFn) MarshalJSON() ([]byte, error) {
	type plain multipliersFn
	return rawname.Marshal((*plain)(f))
}
func (f *multipliersFn) UnmarshalJSON(b []byte) error {
	type plain multipliersFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *summariseFn) MarshalJSON() ([]byte, error) {
	type plain summariseFn
	return rawname.Marshal((*plain)(f))
}
func (f *summariseFn) UnmarshalJSON(b []byte) error {
	type plain summariseFn
	return rawname.Unmarshal(b, (*plain)(f))
}

func (f *writeNPCReportFn) MarshalJSON() ([]byte, error) {
	type plain writeNPCReportFn
	return rawname.Marshal((*plain)(f))
}
func (f *writeNPCReportFn) UnmarshalJSON(b []byte) error {
	type plain writeNPCReportFn
	return rawname.Unmarshal(b, (*plain)(f))
}

// checkDoFnJSON refuses a pipeline with a DoFn of this module whose JSON form is not its own
// (rawname's): Beam would serialise it with encoding/json, losing the bytes of names that are
// not UTF-8.
func checkDoFnJSON(edges []*graph.MultiEdge) error {
	marshaler := reflect.TypeFor[json.Marshaler]()
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	for _, e := range edges {
		if e.DoFn == nil || e.DoFn.Recv == nil {
			continue
		}
		t := reflect.TypeOf(e.DoFn.Recv)
		base := t
		if base.Kind() == reflect.Pointer {
			base = base.Elem()
		}
		if !strings.HasPrefix(base.PkgPath(), "github.com/dcl-beam/dcl-beam/") {
			continue
		}
		if !t.Implements(marshaler) || !reflect.PointerTo(base).Implements(unmarshaler) {
			return fmt.Errorf("internal error: DoFn %v would be serialised by encoding/json, which loses the bytes of names that are not UTF-8: give it MarshalJSON and UnmarshalJSON through rawname (pipelines/dofnjson.go)", base)
		}
	}
	return nil
}
