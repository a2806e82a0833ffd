package reproduce

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// runParams are the parameters a run may set: every registered loss's, then every
// method's, under their configuration names (a run's JSON spells them so too).
func runParams() []registry.Param {
	params := registry.Merge([]registry.Variant{
		{Name: "losses", Params: trainstep.LossParams()},
		{Name: "methods", Params: trainstep.MethodParams()},
	})
	for i := range params {
		params[i].JSON = ""
	}
	return params
}

// paramText is a parameter's value as the YAML gives it, with its line.
type paramText struct {
	value string
	line  int
}

func (p *paramText) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a single value", n.Line)
	}
	p.value, p.line = n.Value, n.Line
	return nil
}

// readParams reads the run's parameter keys (ParamKeys) into Params, each as its
// declaration's type; a key that is neither a field of a run nor a parameter of a loss or
// method is unknown, as the strict decoder says of other unknown keys.
func (r *RunConfig) readParams() error {
	if len(r.ParamKeys) == 0 {
		return nil
	}
	params := runParams()
	r.Params = maps.Clone(r.Params)
	if r.Params == nil {
		r.Params = registry.Values{}
	}
	for _, key := range slices.Sorted(maps.Keys(r.ParamKeys)) {
		text := r.ParamKeys[key]
		p, ok := registry.Lookup(params, key)
		if !ok {
			names := make([]string, len(params))
			for i, p := range params {
				names[i] = p.Name
			}
			return fmt.Errorf("line %d: field %s not found in type reproduce.RunConfig (nor is it a loss's or method's parameter: %s)",
				text.line, key, strings.Join(names, ", "))
		}
		v, err := p.Parse(text.value)
		if err != nil {
			return fmt.Errorf("line %d: %w", text.line, err)
		}
		r.Params[key] = v
	}
	r.ParamKeys = nil
	return nil
}

// MarshalJSON writes the run as its fields always have, the parameters where the fields
// that held them stood (after temperature), so fingerprints, run records and results of
// earlier versions read the same.
func (r RunConfig) MarshalJSON() ([]byte, error) {
	type plain RunConfig
	b, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	pj, err := registry.AppendJSON(nil, runParams(), r.Params, false)
	if err != nil || len(pj) == 0 {
		return b, err
	}
	cut, err := paramsOffset(b)
	if err != nil {
		return nil, err
	}
	if b[cut-1] == '{' {
		pj = pj[1:]
		if b[cut] != '}' {
			pj = append(pj, ',')
		}
	}
	return slices.Concat(b[:cut], pj, b[cut:]), nil
}

// paramsOffset is where in a run's JSON object b the parameters go: after the last key of a
// field declared before Params.
func paramsOffset(b []byte) (int, error) {
	t := reflect.TypeFor[RunConfig]()
	head := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "Params" {
			break
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		head[name] = true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return 0, err
	}
	for dec.More() {
		off := int(dec.InputOffset())
		key, err := dec.Token()
		if err != nil {
			return 0, err
		}
		if !head[key.(string)] {
			return off, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return 0, err
		}
	}
	return int(dec.InputOffset()) - 1, nil
}

// UnmarshalJSON reads a run as MarshalJSON writes it.
func (r *RunConfig) UnmarshalJSON(data []byte) error {
	type plain RunConfig
	if err := json.Unmarshal(data, (*plain)(r)); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	for _, p := range runParams() {
		raw, ok := fields[p.Name]
		if !ok {
			continue
		}
		v, err := p.DecodeJSON(raw)
		if err != nil {
			return fmt.Errorf("run %s: %w", r.Name, err)
		}
		if r.Params == nil {
			r.Params = registry.Values{}
		}
		r.Params[p.Name] = v
	}
	return nil
}
