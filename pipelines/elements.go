package pipelines

import (
	"bytes"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/funcx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// rowCoderURN is Beam's schema row coder, which every runner written in Java decodes.
const rowCoderURN = "beam:coder:row:v1"

// registerElement registers T, a struct that travels between the steps of a pipeline, with a
// coder that runners pass on as opaque bytes: Beam's row encoding, made by the Go SDK on both
// ends. Left to itself, the Go SDK gives such a struct Beam's standard row coder, which a
// runner written in Java (Flink's, Spark's, Dataflow's) decodes and encodes again between
// steps. The Go SDK marks slice and map fields as never null in the schema yet writes a nil
// one as null, and Java's row coder then reads the next bytes as that field: on Flink an
// element whose slice is nil made the records after it vanish, or garbled them, or failed
// the job with an EOFException. Declared opaque, the bytes cross the runner untouched.
//
// The coder is registered as deterministic because the Go SDK offers named coder functions
// (which generic code needs: every instantiation of a closure here has the same symbol)
// only through RegisterDeterministicCoderWithFuncs. The encoding is deterministic unless T
// holds a map; these types are element values, never grouping keys, where that matters.
func registerElement[T any]() {
	t := reflect.TypeFor[T]()
	beam.RegisterType(t)
	enc, err := coder.RowEncoderForStruct(t)
	if err != nil {
		panic(fmt.Sprintf("registerElement: %v", err))
	}
	dec, err := coder.RowDecoderForStruct(t)
	if err != nil {
		panic(fmt.Sprintf("registerElement: %v", err))
	}
	encode := func(v T) ([]byte, error) {
		var buf bytes.Buffer
		if err := enc(v, &buf); err != nil {
			return nil, fmt.Errorf("encoding %v: %w", t, err)
		}
		return buf.Bytes(), nil
	}
	decode := func(b []byte) (T, error) {
		v, err := dec(bytes.NewReader(b))
		if err != nil {
			var zero T
			return zero, fmt.Errorf("decoding %v: %w", t, err)
		}
		return v.(T), nil
	}
	encName := "pipelines.encodeElement[" + t.String() + "]"
	decName := "pipelines.decodeElement[" + t.String() + "]"
	runtime.RegisterFunctionWithName(encName, encode)
	runtime.RegisterFunctionWithName(decName, decode)
	encFn, err := funcx.New(reflectx.MakeFuncWithName(encName, encode))
	if err != nil {
		panic(fmt.Sprintf("registerElement: %v", err))
	}
	decFn, err := funcx.New(reflectx.MakeFuncWithName(decName, decode))
	if err != nil {
		panic(fmt.Sprintf("registerElement: %v", err))
	}
	coder.RegisterDeterministicCoderWithFuncs(t, encFn, decFn)
}

// checkElementCoders marshals p as a runner would receive it and refuses it if a collection
// would travel under Beam's row coder (checkNoRowCoders) or a DoFn under plain encoding/json
// (checkDoFnJSON).
func checkElementCoders(p *beam.Pipeline) error {
	edges, _, err := p.Build()
	if err != nil {
		return err
	}
	if err := checkDoFnJSON(edges); err != nil {
		return err
	}
	proto, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{}})
	if err != nil {
		return err
	}
	return checkNoRowCoders(proto)
}

// checkNoRowCoders refuses a pipeline in which a collection would travel under Beam's row
// coder (see registerElement): a struct element type that was not registered with
// registerElement. It names the collection and its type.
func checkNoRowCoders(p *pipepb.Pipeline) error {
	coders := p.GetComponents().GetCoders()
	var usesRow func(id string, seen map[string]bool) bool
	usesRow = func(id string, seen map[string]bool) bool {
		if seen[id] {
			return false
		}
		seen[id] = true
		c := coders[id]
		if c.GetSpec().GetUrn() == rowCoderURN {
			return true
		}
		for _, sub := range c.GetComponentCoderIds() {
			if usesRow(sub, seen) {
				return true
			}
		}
		return false
	}
	for id, pc := range p.GetComponents().GetPcollections() {
		if usesRow(pc.GetCoderId(), map[string]bool{}) {
			return fmt.Errorf("internal error: collection %s (%s) would cross the runner under Beam's row coder, which runners written in Java decode differently from Go: register its element type with registerElement", id, pc.GetUniqueName())
		}
	}
	return nil
}
