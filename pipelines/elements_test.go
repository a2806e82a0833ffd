package pipelines

import (
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// rowElement is a struct left to the Go SDK's default coder (Beam's row coder).
type rowElement struct {
	Seq    int
	Labels []int
}

// A pipeline whose collections all carry registerElement's coders passes; one with a struct
// left to the row coder is refused before it runs, naming the collection.
func TestCheckElementCodersRefusesRowCoders(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	beam.CreateList(s, []unitStats{{Seq: 1}, {Seq: 2}})
	if err := checkElementCoders(p); err != nil {
		t.Errorf("registered elements: %v", err)
	}

	p, s = beam.NewPipelineWithRoot()
	beam.CreateList(s, []rowElement{{Seq: 1}, {Seq: 2, Labels: []int{3}}})
	err := checkElementCoders(p)
	if err == nil || !strings.Contains(err.Error(), "row coder") || !strings.Contains(err.Error(), "registerElement") {
		t.Errorf("a row-coded collection: %v, want a refusal naming the row coder", err)
	}
}
