package pipelines

import (
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/jsonx"

	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// plainFn is a DoFn left to encoding/json.
type plainFn struct{ Output string }

func (f *plainFn) ProcessElement(x int) int { return x }

func init() { beam.RegisterType(reflect.TypeFor[plainFn]()) } // so that only checkDoFnJSON refuses it

// A DoFn's fields travel to the workers as Beam serialises them (JSON): paths and names that
// are not UTF-8 arrive byte for byte, and a pipeline with a DoFn of ours that would lose them
// is refused before it runs.
func TestDoFnsCarryNamesByteForByte(t *testing.T) {
	fn := &writePartFn{Output: "out/t\xe9st", Units: []datasets.Unit{{Kind: datasets.KindClassFolder, Path: "photos\xff", Dir: "caf\xe9", Files: []string{`a\xe9.png`}}}}
	data, err := jsonx.Marshal(fn)
	if err != nil {
		t.Fatal(err)
	}
	var got writePartFn
	if err := jsonx.Unmarshal(&got, data); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Units, fn.Units) || got.Output != fn.Output {
		t.Errorf("the DoFn arrived as %q %+v, was %q %+v", got.Output, got.Units, fn.Output, fn.Units)
	}
	commit := &commitFn{Output: "out/t\xe9st"}
	if data, err = jsonx.Marshal(commit); err != nil || strings.Contains(string(data), "\ufffd") {
		t.Errorf("commitFn serialised as %s (%v)", data, err)
	}

	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, &drawBatchesFn{Embeddings: "e\xe9"}, beam.Impulse(s))
	if err := checkElementCoders(p); err != nil {
		t.Errorf("a pipeline of our DoFns: %v", err)
	}
	p, s = beam.NewPipelineWithRoot()
	beam.ParDo(s, &plainFn{Output: "x"}, beam.CreateList(s, []int{1}))
	if err := checkElementCoders(p); err == nil || !strings.Contains(err.Error(), "plainFn") || !strings.Contains(err.Error(), "encoding/json") {
		t.Errorf("a DoFn left to encoding/json: %v, want it refused by name", err)
	}
}
