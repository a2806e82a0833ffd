package reproduce

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// runParams are the settings a run may give (trainstep.RunParams), under their
// configuration names (a run's JSON spells them so too).
func runParams() []registry.Param {
	params := trainstep.RunParams()
	for i := range params {
		params[i].JSON = ""
	}
	return params
}

// settingText is a setting's value as the YAML gives it, with its line.
type settingText struct {
	value string
	null  bool
	line  int
}

func (p *settingText) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a single value", n.Line)
	}
	p.value, p.null, p.line = n.Value, n.Tag == "!!null", n.Line
	return nil
}

// readSettings reads the run's setting keys (SettingKeys) into Settings, each as its
// declaration reads it; path names where the run is in messages ("train.defaults"). A key
// that is neither a field of a run nor a setting is unknown, as the strict decoder says of
// other unknown keys.
func (r *RunConfig) readSettings(path string) error {
	if len(r.SettingKeys) == 0 {
		return nil
	}
	params := runParams()
	r.Settings = maps.Clone(r.Settings)
	for _, key := range slices.Sorted(maps.Keys(r.SettingKeys)) {
		text := r.SettingKeys[key]
		p, ok := registry.Lookup(params, key)
		if !ok {
			names := make([]string, len(params))
			for i, p := range params {
				names[i] = p.Name
			}
			return fmt.Errorf("line %d: %s: field %s not found (a run takes name, seeds, paper and the training settings %s)",
				text.line, path, key, strings.Join(names, ", "))
		}
		if text.null {
			delete(r.Settings, key)
			continue
		}
		v, err := p.ParseText(text.value)
		if err != nil {
			return fmt.Errorf("line %d: %s.%s: %w", text.line, path, key, err)
		}
		r.set(p, v)
	}
	r.SettingKeys = nil
	return nil
}

// set gives the run setting p's value v; a zero that stands for the default is no value
// given.
func (r *RunConfig) set(p registry.Param, v any) {
	if p.ZeroIsDefault && reflect.ValueOf(v).IsZero() {
		delete(r.Settings, p.Name)
		return
	}
	if r.Settings == nil {
		r.Settings = map[string]any{}
	}
	r.Settings[p.Name] = v
}

// with returns the run with setting name given the value text reads as (a sweep's point, a
// cell's seed).
func (r RunConfig) with(name, text string) (RunConfig, error) {
	p, ok := registry.Lookup(runParams(), name)
	if !ok {
		return r, fmt.Errorf("no setting %s", name)
	}
	v, err := p.ParseText(text)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	r.Settings = maps.Clone(r.Settings)
	r.set(p, v)
	return r, nil
}

// Set gives setting name the value v, written as YAML would (a config shrunk by a test, a
// run made by one); it panics on a setting that is not declared or a value it cannot read.
func (r *RunConfig) Set(name string, v any) {
	out, err := r.with(name, fmt.Sprint(v))
	if err != nil {
		panic("reproduce: " + err.Error())
	}
	*r = out
}

// Given is the value the run gives setting name, and whether it gives one.
func (r RunConfig) Given(name string) (any, bool) {
	v, ok := r.Settings[name]
	return v, ok
}

// given is the value the run gives setting name (nil where it gives none).
func (r RunConfig) given(name string) any { return r.Settings[name] }

// givenText is a word the run gives ("" where it gives none).
func (r RunConfig) givenText(name string) string {
	if v := r.given(name); v != nil {
		return fmt.Sprint(v)
	}
	return ""
}

// givenNumber is a number the run gives (0 where it gives none).
func (r RunConfig) givenNumber(name string) float64 {
	f, _ := r.given(name).(float64)
	return f
}

// Setting is the value of setting name for the run: given, else its declared default.
func (r RunConfig) Setting(name string) any {
	if v, ok := r.Settings[name]; ok {
		return v
	}
	p, ok := registry.Lookup(runParams(), name)
	if !ok {
		panic(fmt.Sprintf("reproduce: no setting %s", name))
	}
	return p.DefaultValue()
}

// The settings the reproduction reads beyond training: as the run gives them (zero where
// it leaves them to the default), except Seed and Backend, which are the run's own.

// Method is the run's training method ("": the default).
func (r RunConfig) Method() string { return r.givenText(trainstep.SettingMethod) }

// Loss is the run's loss.
func (r RunConfig) Loss() string { return r.givenText(trainstep.SettingLoss) }

// Model is the run's encoder.
func (r RunConfig) Model() string { return r.givenText(trainstep.SettingModel) }

// BatchSize is the run's view pairs per step.
func (r RunConfig) BatchSize() int { return int(r.givenNumber(trainstep.SettingBatchSize)) }

// Epochs is the run's epochs.
func (r RunConfig) Epochs() int { return int(r.givenNumber(trainstep.SettingEpochs)) }

// Temperature is the run's τ.
func (r RunConfig) Temperature() float64 { return r.givenNumber(trainstep.SettingTemperature) }

// Precision is the run's arithmetic ("": the default).
func (r RunConfig) Precision() trainstep.Precision {
	return trainstep.Precision(r.givenText(trainstep.SettingPrecision))
}

// Seed is the run's training seed: given, else the default.
func (r RunConfig) Seed() uint64 { return r.Setting(trainstep.SettingSeed).(uint64) }

// Backend is the run's compute backend: given, else the default.
func (r RunConfig) Backend() string { return fmt.Sprint(r.Setting(trainstep.SettingBackend)) }

// QueueSize is the run's queue (or support set) size (0 where it gives none).
func (r RunConfig) QueueSize() int { return int(r.givenNumber(trainstep.SettingQueueSize)) }

// Training is the trainer's configuration of the run on 3-channel images: every setting as
// the run gives it, else its declared default (trainstep.ApplySettings).
func (r RunConfig) Training() (trainstep.ShardTraining, error) {
	var t trainstep.ShardTraining
	t.Step.Model.Channels = 3
	if err := trainstep.ApplySettings(&t, r.Settings); err != nil {
		return t, fmt.Errorf("run %s: %w", r.Name, err)
	}
	return t, nil
}

// MarshalJSON writes the run as its fields always have: the name, the settings given in
// their declared order, the seeds and the paper's figures; so fingerprints, run records and
// results of earlier versions read the same.
func (r RunConfig) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	key := func(name string) {
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendQuote(buf, name)
		buf = append(buf, ':')
	}
	if r.Name != "" {
		key("name")
		buf = strconv.AppendQuote(buf, r.Name)
	}
	for _, p := range runParams() {
		v, ok := r.Settings[p.Name]
		if !ok {
			continue
		}
		key(p.Name)
		var err error
		if buf, err = p.AppendJSONValue(buf, v); err != nil {
			return nil, fmt.Errorf("run %s: %w", r.Name, err)
		}
	}
	tail, err := json.Marshal(struct {
		Seeds []uint64     `json:"seeds,omitempty"`
		Paper PaperFigures `json:"paper"`
	}{r.Seeds, r.Paper})
	if err != nil {
		return nil, err
	}
	if len(buf) > 1 {
		buf = append(buf, ',')
	}
	return append(buf, tail[1:]...), nil
}

// UnmarshalJSON reads a run as MarshalJSON writes it.
func (r *RunConfig) UnmarshalJSON(data []byte) error {
	var head struct {
		Name  string       `json:"name"`
		Seeds []uint64     `json:"seeds"`
		Paper PaperFigures `json:"paper"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return err
	}
	*r = RunConfig{Name: head.Name, Seeds: head.Seeds, Paper: head.Paper}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	for _, p := range runParams() {
		raw, ok := fields[p.Name]
		if !ok {
			continue
		}
		v, err := p.DecodeJSONValue(raw)
		if err != nil && p.Value != nil {
			err = fmt.Errorf("%s: %w", p.Name, err)
		}
		if err != nil {
			return fmt.Errorf("run %s: %w", r.Name, err)
		}
		r.set(p, v)
	}
	return nil
}
