package reproduce

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// evaluationSection is one evaluate.NAME section as the YAML gives it.
type evaluationSection struct{ node yaml.Node }

func (e *evaluationSection) UnmarshalYAML(n *yaml.Node) error {
	e.node = *n
	return nil
}

// evaluationNames are the evaluations a config may ask for.
func evaluationNames() []string {
	var names []string
	for _, ev := range pipelines.EncoderEvaluations() {
		names = append(names, ev.Name)
	}
	return names
}

// readSections reads the evaluate.NAME sections (Sections) into Evaluations, each key as its
// evaluation declares it and checked there; a section that names no evaluation a config can
// ask for is unknown, as the strict decoder says of other unknown keys. An empty section
// (knn:) asks for nothing, as a missing one.
func (e *EvaluateConfig) readSections() error {
	for _, name := range slices.Sorted(maps.Keys(e.Sections)) {
		section := e.Sections[name]
		n := &section.node
		ev, ok := pipelines.LookupEvaluation(name)
		if !ok || ev.Encoder == nil {
			return fmt.Errorf("line %d: field %s not found in type reproduce.EvaluateConfig (nor is it an evaluation of an encoder: %s)",
				n.Line, name, strings.Join(evaluationNames(), ", "))
		}
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			continue
		}
		s, err := registry.ReadYAML("evaluate."+name, ev.Params, n)
		if err != nil {
			return err
		}
		if e.Evaluations == nil {
			e.Evaluations = map[string]registry.Settings{}
		}
		e.Evaluations[name] = s
	}
	e.Sections = nil
	return nil
}

// Has reports whether the config asks for the evaluation name.
func (e EvaluateConfig) Has(name string) bool {
	_, ok := e.Evaluations[name]
	return ok
}

// Settings are the evaluation's settings, if the config asks for it.
func (e EvaluateConfig) Settings(name string) (registry.Settings, bool) {
	s, ok := e.Evaluations[name]
	return s, ok
}

// Set gives setting key of the evaluation name the value v (a config shrunk by a test);
// it asks for the evaluation if the config did not.
func (e *EvaluateConfig) Set(name, key string, v any) {
	ev, ok := pipelines.LookupEvaluation(name)
	if !ok {
		panic("reproduce: no evaluation " + name)
	}
	s, ok := e.Evaluations[name]
	if !ok {
		s = registry.NewSettings(ev.Params, nil)
	}
	e.Evaluations = maps.Clone(e.Evaluations)
	if e.Evaluations == nil {
		e.Evaluations = map[string]registry.Settings{}
	}
	e.Evaluations[name] = s.With(key, v)
}

// MarshalJSON writes the evaluations as their fields always have (fingerprints, results of
// earlier versions): feature, then each evaluation's section in registration order (knn,
// linear, npc), then the monitor's settings and the baselines.
func (e EvaluateConfig) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	add := func(key string, raw []byte) {
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendQuote(buf, key)
		buf = append(buf, ':')
		buf = append(buf, raw...)
	}
	if e.Feature != "" {
		raw, err := json.Marshal(e.Feature)
		if err != nil {
			return nil, err
		}
		add("feature", raw)
	}
	for _, ev := range pipelines.EncoderEvaluations() {
		s, ok := e.Evaluations[ev.Name]
		if !ok {
			continue
		}
		raw, err := registry.MarshalSettings(s)
		if err != nil {
			return nil, fmt.Errorf("evaluate.%s: %w", ev.Name, err)
		}
		add(ev.Name, raw)
	}
	type rest struct {
		KNNEvery   int               `json:"knn_every,omitempty"`
		KNNMonitor *KNNMonitorConfig `json:"knn_monitor,omitempty"`
		Baselines  []string          `json:"baselines,omitempty"`
	}
	raw, err := json.Marshal(rest{e.KNNEvery, e.KNNMonitor, e.Baselines})
	if err != nil {
		return nil, err
	}
	if len(raw) > 2 {
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(buf, raw[1:len(raw)-1]...)
	}
	return append(buf, '}'), nil
}

// UnmarshalJSON reads the evaluations as MarshalJSON writes them.
func (e *EvaluateConfig) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	type plain struct {
		Feature    string            `json:"feature"`
		KNNEvery   int               `json:"knn_every"`
		KNNMonitor *KNNMonitorConfig `json:"knn_monitor"`
		Baselines  []string          `json:"baselines"`
	}
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*e = EvaluateConfig{Feature: p.Feature, KNNEvery: p.KNNEvery, KNNMonitor: p.KNNMonitor, Baselines: p.Baselines}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		switch key {
		case "feature", "knn_every", "knn_monitor", "baselines":
			continue
		}
		ev, ok := pipelines.LookupEvaluation(key)
		if !ok || ev.Encoder == nil {
			return fmt.Errorf("evaluate: unknown evaluation %q (want %s)", key, strings.Join(evaluationNames(), ", "))
		}
		s, err := registry.UnmarshalSettings("evaluate."+key, ev.Params, fields[key])
		if err != nil {
			return err
		}
		if e.Evaluations == nil {
			e.Evaluations = map[string]registry.Settings{}
		}
		e.Evaluations[key] = s
	}
	return nil
}
