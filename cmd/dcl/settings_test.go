package main

import (
	"flag"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// exampleWords are values other than the default of the settings whose values are words; a
// setting of another form gets one from its type (exampleText).
var exampleWords = map[string]string{
	trainstep.SettingMethod: "nnclr", trainstep.SettingLoss: "infonce", trainstep.SettingModel: "small-cnn",
	trainstep.SettingOptimizer: "lars", trainstep.SettingBackend: "cpu", trainstep.SettingPrecision: "tf32",
	trainstep.SettingNormalization: "cifar10", trainstep.SettingReduction: "sum",
}

// exampleText is a value of setting s, other than its default where the test knows one, as
// a flag and a YAML scalar write it.
func exampleText(s trainstep.Setting) string {
	if w, ok := exampleWords[s.Name]; ok {
		return w
	}
	switch def := s.DefaultValue().(type) {
	case float64:
		switch {
		case s.Type == registry.Bool:
			return strconv.FormatBool(def == 0)
		case s.Type == registry.Int:
			return strconv.Itoa(int(def) + 3)
		case def != 0:
			return registry.FormatFloat(def / 2)
		}
		return "0.5"
	case uint64:
		return strconv.FormatUint(def+3, 10)
	}
	return s.FormatValue(s.DefaultValue())
}

// TestSettingsHaveOneDoor: every training setting is a flag of dcl train with its
// declaration's help, and every one a configuration takes is a key of a reproduce run that
// gives the trainer the same value as the flag; the command line's own settings are refused
// as keys. So a setting declared once (trainstep.TrainSettings) is both, with nothing else to
// write.
func TestSettingsHaveOneDoor(t *testing.T) {
	const config = `name: doors
dataset: {name: idx, input: /nowhere}
preprocess: {augment: simclr-cifar, passes: 1}
train:
  defaults: {model: mlp, loss: dcl, epochs: 2, batch_size: 16, temperature: 0.2}
  runs: [{name: r, KEY: VALUE}]
`
	for _, key := range []string{trainstep.SettingProjectionDim, trainstep.SettingDecayAll} {
		if i := slices.IndexFunc(trainstep.RunParams(), func(p registry.Param) bool { return p.Name == key }); i < 0 {
			t.Errorf("a config's run has no key %s", key)
		}
	}
	var defaults trainstep.ShardTraining
	if err := trainstep.ApplySettings(&defaults, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range trainstep.TrainSettings() {
		text := exampleText(s)
		fs := flag.NewFlagSet("train", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		apply := registerSettingFlags(fs, trainstep.TrainSettings(), true)
		f := fs.Lookup(s.Flag())
		if f == nil || f.Usage != s.Doc {
			t.Errorf("setting %s: dcl train has no flag --%s with its help", s.Name, s.Flag())
			continue
		}
		if err := fs.Parse([]string{"--" + s.Flag() + "=" + text}); err != nil {
			t.Errorf("--%s=%s: %v", s.Flag(), text, err)
			continue
		}
		var byFlag trainstep.ShardTraining
		if err := apply(&byFlag); err != nil {
			t.Errorf("--%s=%s: %v", s.Flag(), text, err)
			continue
		}
		yaml := strings.NewReplacer("KEY", s.Name, "VALUE", strconv.Quote(text)).Replace(config)
		c, err := reproduce.Parse(strings.NewReader(yaml), "doors.yaml")
		if s.Surface == registry.CommandOnly {
			if err == nil || !strings.Contains(err.Error(), "field "+s.Name+" not found") {
				t.Errorf("setting %s is the command line's, but a config's run takes it: %v", s.Name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("setting %s: %v", s.Name, err)
			continue
		}
		byConfig, err := c.Runs[0].Training()
		if err != nil {
			t.Fatal(err)
		}
		got, want := s.Get(&byConfig), s.Get(&byFlag)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("setting %s=%s: the config gives the trainer %v, the flag %v", s.Name, text, got, want)
		}
		if text != s.FormatValue(s.DefaultValue()) && reflect.DeepEqual(got, s.Get(&defaults)) {
			t.Errorf("setting %s=%s did not reach its field", s.Name, text)
		}
	}
}
