package trainstep

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// toyMethod is a method as the package doc says one is added: it encodes the two views as two
// batches (batch-norm statistics per view, as MoCo's query encoder sees them), and it keeps
// state between steps, a step counter and the previous step's mean projection, in variables
// of its own that are not trained.
type toyMethod struct{}

const toyMethodName = "toy-two-batches"

func (toyMethod) Name() string { return toyMethodName }

func (toyMethod) state(scope *model.Scope) (steps, lastMean *model.Variable) {
	s := scope.At("method").At("toy")
	return s.GetVariable("steps"), s.GetVariable("last_mean")
}

func (m toyMethod) CreateVariables(g *MethodGraph) {
	s := g.Scope.At("method").At("toy")
	s.VariableWithValue("steps", float32(0)).SetTrainable(false)
	s.VariableWithValue("last_mean", make([]float32, g.Model.Config().ProjectionDim)).SetTrainable(false)
}

func (toyMethod) TrainGraph(g *MethodGraph, view1, view2 *Node) TrainNodes {
	z1, z2 := g.Encode(view1), g.Encode(view2)
	nodes := LossGraph(z1, z2, g.Loss)
	return TrainNodes{Loss: nodes.Loss, Q: nodes.Q, Kept: map[string]*Node{"mean": ReduceMean(StopGradient(z1), 0)}}
}

func (m toyMethod) AfterUpdate(g *MethodGraph, nodes TrainNodes) {
	steps, lastMean := m.state(g.Scope)
	gr := nodes.Loss.Graph()
	steps.SetNodeValue(AddScalar(steps.NodeValue(gr), 1))
	lastMean.SetNodeValue(nodes.Kept["mean"])
}

func init() {
	RegisterMethod(MethodSpec{Name: toyMethodName, Display: "toy", New: func(StepConfig) (Method, error) { return toyMethod{}, nil }})
}

func TestMethodRegistry(t *testing.T) {
	if names := MethodNames(); !slices.Contains(names, SimCLRMethod) || !slices.Contains(names, toyMethodName) {
		t.Errorf("MethodNames() = %v", names)
	}
	cfg := testStepConfig(MLP)
	cfg.Method = "byol-someday"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "unknown training method") {
		t.Errorf("Validate with an unknown method = %v", err)
	}
	if _, err := NewStep(newTestBackend(t), cfg, 6, 6); err == nil {
		t.Error("NewStep accepted an unknown method")
	}
	s, err := NewStep(newTestBackend(t), testStepConfig(MLP), 6, 6)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	if s.Config().Method != SimCLRMethod {
		t.Errorf("the default method is %q, want %s", s.Config().Method, SimCLRMethod)
	}
}

// TestToyMethodStateIsKeptAndResumed: a method's own variables are updated by its AfterUpdate
// in training steps only (not by Gradients), saved in checkpoints, and restored on resume:
// an interrupted run ends bit-identical to one that never stopped, and resuming it with
// another method is refused.
func TestToyMethodStateIsKeptAndResumed(t *testing.T) {
	cfg := testStepConfig(SmallCNN)
	cfg.Method = toyMethodName
	s, err := NewStep(newTestBackend(t), cfg, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	steps, _ := toyMethod{}.state(s.Store().RootScope())
	b := RandomBatch(3, 4, 8, 8, 1)
	if _, err := s.Gradients(b); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Run(b, 0.1); err != nil {
			t.Fatal(err)
		}
	}
	v, err := steps.Value()
	if err != nil {
		t.Fatal(err)
	}
	if got := tensors.ToScalar[float32](v); got != 3 {
		t.Errorf("after Gradients and 3 steps the method counted %v steps, want 3", got)
	}

	src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
	ctx := context.Background()
	whole, out, run := stoppedRun(t, cfg, src)
	var setup *SetupError
	if err := CheckRun(ctx, testStepConfig(SmallCNN), run, src.Info(), out); !errors.As(err, &setup) || !strings.Contains(err.Error(), "method") {
		t.Errorf("resuming a %s run as %s: %v, want a setup error naming the method", toyMethodName, SimCLRMethod, err)
	}
	opts := quietOptions(t, src)
	opts.Resume = out
	resumed, err := Train(ctx, cfg, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	wholeVars, resumedVars := variableBytes(t, whole.Checkpoint), variableBytes(t, resumed.Checkpoint)
	if _, ok := wholeVars["/method/toy/steps"]; !ok {
		t.Fatalf("the checkpoint lacks the method's variables: %v", keys(wholeVars))
	}
	sameBytes(t, wholeVars, resumedVars)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSettingsJSON: checkpoints hold the method's settings and the loss's parameters in the
// order and under the keys they always had (MoCo's in field order, whole numbers as such,
// the hypersphere's α as "alpha"); checkpoints of earlier versions, which left default
// settings out, read; a key no method or loss declares is refused.
func TestSettingsJSON(t *testing.T) {
	mc := MethodConfig{SettingBNSplits: 2, SettingQueueSize: 12, SettingSymmetric: 1, SettingMomentumEMA: 0.99}
	data, err := json.Marshal(mc)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"queue_size":12,"momentum_ema":0.99,"symmetric":true,"bn_splits":2}`; string(data) != want {
		t.Errorf("MethodConfig JSON = %s, want %s", data, want)
	}
	var back MethodConfig
	if err := json.Unmarshal(data, &back); err != nil || !maps.Equal(back, mc) {
		t.Errorf("read back %v, %v; want %v", back, err, mc)
	}
	var legacy MethodConfig
	if err := json.Unmarshal([]byte(`{"queue_size":16}`), &legacy); err != nil {
		t.Fatal(err)
	}
	if got, err := legacy.withDefaults(mustLookupMethod(t, MoCoMethod)); err != nil || got.Float(SettingMomentumEMA) != 0.999 || got.Int(SettingQueueSize) != 16 {
		t.Errorf("an old checkpoint's settings with MoCo's defaults = %v, %v", got, err)
	}
	if err := json.Unmarshal([]byte(`{"queue_sise":16}`), &legacy); err == nil || !strings.Contains(err.Error(), `"queue_sise"`) {
		t.Errorf("an unknown setting: %v", err)
	}

	loss := LossConfig{Kind: Hypersphere, Temperature: 0.1, Reduction: Mean, Params: registry.Values{ParamAlpha: 3, ParamUniformT: 1}}
	if data, err = json.Marshal(loss); err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"hypersphere","temperature":0.1,"sigma":0,"alpha":3,"uniform_t":1,"reduction":"mean","weight_grad":false}`; string(data) != want {
		t.Errorf("LossConfig JSON = %s, want %s", data, want)
	}
	var lc LossConfig
	if err := json.Unmarshal(data, &lc); err != nil || !reflect.DeepEqual(lc, loss) {
		t.Errorf("read back %+v, %v; want %+v", lc, err, loss)
	}
	if err := json.Unmarshal([]byte(`{"kind":"dcl","temperature":0.1,"margin":1}`), &lc); err == nil || !strings.Contains(err.Error(), `"margin"`) {
		t.Errorf("an unknown loss key: %v", err)
	}
}

func mustLookupMethod(t *testing.T, name string) MethodSpec {
	t.Helper()
	spec, err := LookupMethod(name)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
