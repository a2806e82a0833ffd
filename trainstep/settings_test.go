package trainstep

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// otherValue is a value of setting s that is not its default, of the kind ApplySettings takes.
func otherValue(s Setting) any {
	switch def := s.DefaultValue().(type) {
	case float64:
		if s.Type == registry.Bool {
			return 1 - def
		}
		if s.Type == registry.Int {
			return def + 3
		}
		return def + 0.25
	case uint64:
		return def + 3
	}
	if reflect.ValueOf(s.DefaultValue()).Kind() == reflect.String {
		return "x-" + s.Name // stored as given: what the checkpoint keeps is the point here
	}
	panic("no other value for setting " + s.Name)
}

// notStored are the settings a checkpoint does not hold, and why.
var notStored = map[string]string{
	SettingBackend: "the run records the backend it ran on (RunConfig.Backend), not the one asked for",
}

// TestEverySettingIsStoredInTheCheckpoint: each declared setting, given a value other than
// its default, reaches its field, and a checkpoint's header (the step's and the run's
// configuration) holds it and reads it back: a setting's checkpoint key is derived from the
// field its declaration names.
func TestEverySettingIsStoredInTheCheckpoint(t *testing.T) {
	settings := TrainSettings()
	given, defaults := map[string]any{}, map[string]any{}
	for _, s := range settings {
		given[s.Name], defaults[s.Name] = otherValue(s), s.DefaultValue()
	}
	var tr, byDefault ShardTraining
	if err := ApplySettings(&tr, given); err != nil {
		t.Fatal(err)
	}
	if err := ApplySettings(&byDefault, defaults); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(CheckpointHeader{FormatVersion: checkpointVersion, Step: tr.Step, Run: &tr.Run})
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var h CheckpointHeader
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	back := ShardTraining{Step: h.Step, Run: *h.Run}
	for _, s := range settings {
		want := s.Get(&tr)
		// Against the default's field, not the zero value: a setting whose default is not
		// its field's zero value (dclw_grad: true) is given the zero value here.
		if reflect.DeepEqual(want, s.Get(&byDefault)) {
			t.Errorf("setting %s: given %v, its field holds what its default %v gives", s.Name, given[s.Name], defaults[s.Name])
		}
		stored := within(s.Field(&tr), &tr.Step) || within(s.Field(&tr), &tr.Run)
		if why, ok := notStored[s.Name]; ok {
			if stored {
				t.Errorf("setting %s is stored after all (notStored says %q)", s.Name, why)
			}
			continue
		}
		if !stored {
			t.Errorf("setting %s is held outside the step's and the run's configuration: no checkpoint stores it", s.Name)
			continue
		}
		if got := s.Get(&back); !reflect.DeepEqual(got, want) {
			t.Errorf("setting %s: the checkpoint reads back %v, want %v (header %s)", s.Name, got, want, raw)
		}
	}
}

// TestSettingsAreDeclaredOnce: every setting's name is a distinct configuration key, none is
// a loss's or a method's parameter, and RunParams lists every one a configuration takes
// with the losses' and methods' parameters, in the order a run's JSON has them.
func TestSettingsAreDeclaredOnce(t *testing.T) {
	var names []string
	for _, s := range TrainSettings() {
		if slices.Contains(names, s.Name) {
			t.Errorf("setting %s is declared twice", s.Name)
		}
		names = append(names, s.Name)
		if s.Doc == "" || s.Field == nil {
			t.Errorf("setting %s lacks its help or its field", s.Name)
		}
		for _, p := range append(LossParams(), MethodParams()...) {
			if p.Name == s.Name {
				t.Errorf("setting %s is also a loss's or method's parameter", s.Name)
			}
		}
	}
	var run []string
	for _, p := range RunParams() {
		run = append(run, p.Name)
	}
	temperature := slices.Index(run, SettingTemperature)
	if temperature < 0 || run[temperature+1] != LossParams()[0].Name || slices.Contains(run, SettingInitSeed) {
		t.Errorf("RunParams = %v: want the configuration's settings, the losses' parameters right after temperature, no command-line-only ones", run)
	}
}

// TestApplySettingsDefaults: no setting given, the configuration is the paper's (PaperDefaults)
// and the command line's defaults; a name that is not declared is refused.
func TestApplySettingsDefaults(t *testing.T) {
	var tr ShardTraining
	if err := ApplySettings(&tr, nil); err != nil {
		t.Fatal(err)
	}
	paper := PaperDefaults()
	if tr.Step.Loss.Kind != paper.Loss || tr.Step.Loss.Temperature != paper.Temperature || tr.Run.BatchSize != paper.BatchSize ||
		tr.Run.Epochs != paper.Epochs || tr.Run.BaseLR != paper.BaseLR || tr.Step.Optimizer != paper.OptimizerConfig() ||
		tr.Run.CheckpointEvery != paper.CheckpointEvery || tr.Run.Seed != 1 || tr.Step.Model.Name != ResNet18CIFAR ||
		tr.Step.Model.ProjectionDim != DefaultProjectionDim || tr.Step.Method != SimCLRMethod || tr.Step.Loss.Reduction != Mean {
		t.Errorf("defaults %+v", tr)
	}
	if err := ApplySettings(&tr, map[string]any{"colour": "blue"}); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("an unknown setting: %v", err)
	}
	if err := ApplySettings(&tr, map[string]any{ParamSigma: 0.3, SettingQueueSize: 8.0}); err != nil ||
		tr.Step.Loss.Params.Float(ParamSigma) != 0.3 || tr.Step.MethodConfig.Int(SettingQueueSize) != 8 {
		t.Errorf("a loss's and a method's parameter: %v, %+v", err, tr.Step)
	}
}

// DCLW's gradient flows through its weights unless a run says otherwise (dclw_grad: false),
// as the paper's formula and lightly's DCLWLoss: a config's key and a flag, whose default is
// the gradient's.
func TestDCLWGradientThroughTheWeightsByDefault(t *testing.T) {
	var dflt, constant ShardTraining
	if err := ApplySettings(&dflt, map[string]any{SettingLoss: "dclw"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplySettings(&constant, map[string]any{SettingLoss: "dclw", SettingDCLWGrad: 0.0}); err != nil {
		t.Fatal(err)
	}
	if !dflt.Step.Loss.WeightGrad || constant.Step.Loss.WeightGrad {
		t.Errorf("weight gradient: %v by default, %v with dclw_grad false; want true and false", dflt.Step.Loss.WeightGrad, constant.Step.Loss.WeightGrad)
	}
	if _, ok := registry.Lookup(RunParams(), SettingDCLWGrad); !ok {
		t.Errorf("dclw_grad is not a config's key")
	}
}
