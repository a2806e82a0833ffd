package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// Value is the form of a parameter whose values are not one number (Param.Value): a word, a
// path, a seed, a list of whole numbers, a pair, a value per view. Every surface reads it as
// text: a flag's value, a YAML scalar, the items of a YAML or JSON list joined by commas.
type Value interface {
	// Default is the value where a configuration or command line leaves the parameter out.
	Default() any
	// Parse reads a value written as text; the error says what is wrong, without the
	// parameter's name.
	Parse(text string) (any, error)
	// Format writes v as Parse reads it.
	Format(v any) string
	// TypeName names the values in help: "string", "uint", "list".
	TypeName() string
}

// Repeatable is a Value a command line may give several times (--input a --input b): each
// occurrence adds to the value so far.
type Repeatable interface {
	Value
	Add(sofar any, text string) (any, error)
}

// valueOf is a Value of Go type T, read by parse and written by format.
type valueOf[T any] struct {
	def      T
	typeName string
	parse    func(string) (T, error)
	format   func(T) string
	add      func(T, string) (T, error)
}

// Of returns a Value of type T with default def, read by parse and written by format (nil:
// fmt.Sprint); typeName names it in help.
func Of[T any](def T, typeName string, parse func(string) (T, error), format func(T) string) Value {
	if format == nil {
		format = func(v T) string { return fmt.Sprint(v) }
	}
	return valueOf[T]{def: def, typeName: typeName, parse: parse, format: format}
}

func (v valueOf[T]) Default() any     { return v.def }
func (v valueOf[T]) TypeName() string { return v.typeName }
func (v valueOf[T]) Parse(s string) (any, error) {
	x, err := v.parse(s)
	if err != nil {
		return nil, err
	}
	return x, nil
}

func (v valueOf[T]) Format(x any) string {
	t, ok := x.(T)
	if !ok {
		return fmt.Sprint(x)
	}
	return v.format(t)
}

// repeatable is a valueOf whose flag may be given several times.
type repeatable[T any] struct{ valueOf[T] }

func (v repeatable[T]) Add(sofar any, s string) (any, error) {
	t, _ := sofar.(T)
	return v.add(t, s)
}

// Text is free text (a path, a name); "" is its default unless def says otherwise.
func Text(def string) Value {
	return Of(def, "string", func(s string) (string, error) { return s, nil }, nil)
}

// Word is one of choices (a closed set of names), checked by parse (nil: any word).
func Word[T ~string](def T, parse func(string) (T, error)) Value {
	if parse == nil {
		parse = func(s string) (T, error) { return T(s), nil }
	}
	return Of(def, "string", parse, func(v T) string { return string(v) })
}

// Uint is a whole number of 0 or more held exactly (a seed: 64 bits, beyond a float's 53).
func Uint(def uint64) Value {
	return Of(def, "uint", func(s string) (uint64, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number of 0 or more", s)
		}
		return n, nil
	}, func(v uint64) string { return strconv.FormatUint(v, 10) })
}

// Ints is a comma-separated list of whole numbers; check says what is wrong with a list
// that parses ("" when it is fine; nil accepts any). An empty text is the empty list.
func Ints(def []int, check func([]int) string) Value {
	return Of(def, "string", func(s string) ([]int, error) {
		var out []int
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a whole number", f)
			}
			out = append(out, n)
		}
		if strings.TrimSpace(s) != "" && len(out) == 0 {
			return nil, errors.New("empty list")
		}
		if check != nil {
			if reason := check(out); reason != "" {
				return nil, errors.New(reason)
			}
		}
		return out, nil
	}, func(v []int) string {
		parts := make([]string, len(v))
		for i, n := range v {
			parts[i] = strconv.Itoa(n)
		}
		return strings.Join(parts, ",")
	})
}

// Floats is n to m comma-separated numbers, as a [2]float64 (a range MIN,MAX, or a value per
// view): with n = 1, one number stands for both. check says what is wrong with a pair that
// parses (nil accepts any).
func Floats[T ~[2]float64](def T, n int, check func(T) string) Value {
	return Of(def, "value", func(s string) (T, error) {
		var out T
		parts := strings.Split(s, ",")
		if len(parts) < n || len(parts) > 2 {
			if n == 2 {
				return out, fmt.Errorf("want 2 comma-separated numbers, got %d", len(parts))
			}
			return out, fmt.Errorf("want %d to 2 comma-separated numbers, got %d", n, len(parts))
		}
		for i, p := range parts {
			x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil {
				return out, fmt.Errorf("%q is not a number", p)
			}
			out[i] = x
		}
		if len(parts) == 1 {
			out[1] = out[0]
		}
		if check != nil {
			if reason := check(out); reason != "" {
				return out, errors.New(reason)
			}
		}
		return out, nil
	}, func(v T) string {
		if n == 1 && v[0] == v[1] {
			return FormatFloat(v[0])
		}
		return FormatFloat(v[0]) + "," + FormatFloat(v[1])
	})
}

// FormatFloat writes a number as flags and messages show it: the shortest form that reads
// back the same.
func FormatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Strings is a list of texts a command line gives by repeating the flag; with split, each
// occurrence may also be a comma-separated list.
func Strings(split bool) Value {
	parse := func(s string) ([]string, error) { return addStrings(nil, s, split), nil }
	v := valueOf[[]string]{def: nil, typeName: "value", parse: parse,
		format: func(v []string) string { return strings.Join(v, ",") },
		add:    func(sofar []string, s string) ([]string, error) { return addStrings(sofar, s, split), nil }}
	return repeatable[[]string]{v}
}

func addStrings(sofar []string, s string, split bool) []string {
	out := slices.Clone(sofar)
	if !split {
		return append(out, s)
	}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Settings are the values of a variant's declared parameters, of any type: numbers (held as
// float64, as Values holds them) and Values' own. It tells the values given apart from the
// defaults that stand for the others.
type Settings struct {
	params []Param
	given  map[string]any
}

// NewSettings holds given (by parameter name, unchecked) over the defaults of params.
func NewSettings(params []Param, given map[string]any) Settings {
	g := make(map[string]any, len(given))
	for k, v := range given {
		g[k] = v
	}
	return Settings{params: params, given: g}
}

// Given returns the value given for name, if one was.
func (s Settings) Given(name string) (any, bool) {
	v, ok := s.given[name]
	return v, ok
}

// GivenNames lists the parameters given a value, in declaration order.
func (s Settings) GivenNames() []string {
	var out []string
	for _, p := range s.params {
		if _, ok := s.given[p.Name]; ok {
			out = append(out, p.Name)
		}
	}
	return out
}

// With returns s with name given v (for code that sets a value, as a test shrinking a
// config does); name must be declared.
func (s Settings) With(name string, v any) Settings {
	p, ok := Lookup(s.params, name)
	if !ok {
		panic(fmt.Sprintf("registry: no parameter %s", name))
	}
	if p.Value == nil {
		v = toFloat(v)
	}
	out := NewSettings(s.params, s.given)
	out.given[name] = v
	return out
}

func toFloat(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case bool:
		return boolValue(x)
	}
	return v
}

// Empty reports whether name's value is its type's zero ("", an empty list): a required
// flag's that the command line left out.
func (s Settings) Empty(name string) bool { return isZero(s.Get(name)) }

// Get is the value of name: given, else its default.
func (s Settings) Get(name string) any {
	if v, ok := s.given[name]; ok {
		return v
	}
	p, ok := Lookup(s.params, name)
	if !ok {
		panic(fmt.Sprintf("registry: no parameter %s", name))
	}
	return p.DefaultValue()
}

// Float is a number's value.
func (s Settings) Float(name string) float64 { f, _ := s.Get(name).(float64); return f }

// Int is a whole number's value.
func (s Settings) Int(name string) int { return int(s.Float(name)) }

// Bool is a true/false parameter's value.
func (s Settings) Bool(name string) bool { return s.Float(name) != 0 }

// String is a Text or Word value as its text.
func (s Settings) String(name string) string {
	if v := s.Get(name); v != nil {
		p, _ := Lookup(s.params, name)
		return p.FormatValue(v)
	}
	return ""
}

// Uint is a Uint value.
func (s Settings) Uint(name string) uint64 { n, _ := s.Get(name).(uint64); return n }

// IntList is an Ints value.
func (s Settings) IntList(name string) []int { v, _ := s.Get(name).([]int); return v }

// StringList is a Strings value.
func (s Settings) StringList(name string) []string { v, _ := s.Get(name).([]string); return v }

// DefaultValue is the parameter's default as Settings holds it.
func (p Param) DefaultValue() any {
	if p.Value != nil {
		return p.Value.Default()
	}
	return p.Default
}

// FormatValue writes a value of the parameter as its flag reads it.
func (p Param) FormatValue(v any) string {
	if p.Value != nil {
		return p.Value.Format(v)
	}
	f, _ := v.(float64)
	return p.Format(f)
}

// Surface says where a parameter is given: a command line, a configuration, or both.
type Surface int

const (
	// Everywhere: a flag and a configuration key.
	Everywhere Surface = iota
	// CommandOnly: a flag only (the paths and outputs a configuration's layout decides).
	CommandOnly
)

// SettingFlags registers one flag per parameter of params (numbers as the flag package's
// own kinds, Values as their text) with its doc and default; owner names the variant in the
// messages of a check. The returned function, called after parsing, gives the settings of
// the flags the command line set, each checked once.
func SettingFlags(fs *flag.FlagSet, owner string, params []Param) func() (Settings, error) {
	given := map[string]any{}
	var checks []func() error
	for _, p := range params {
		help := p.Doc
		switch {
		case p.Value != nil:
			fs.Var(&valueFlag{p: p, owner: owner, given: given, text: defaultText(p)}, p.Flag(), help)
		case p.Type == Bool:
			b := fs.Bool(p.Flag(), p.Default != 0, help)
			checks = append(checks, func() error { return setIfGiven(fs, p, owner, given, boolValue(*b)) })
		case p.Type == Int:
			n := fs.Int(p.Flag(), int(p.Default), help)
			checks = append(checks, func() error { return setIfGiven(fs, p, owner, given, float64(*n)) })
		default:
			f := fs.Float64(p.Flag(), p.Default, help)
			checks = append(checks, func() error { return setIfGiven(fs, p, owner, given, *f) })
		}
	}
	return func() (Settings, error) {
		var errs []error
		for _, c := range checks {
			errs = append(errs, c())
		}
		if err := errors.Join(errs...); err != nil {
			return Settings{}, usage.Errorf("%w", err) // the command line's
		}
		return NewSettings(params, given), nil
	}
}

func setIfGiven(fs *flag.FlagSet, p Param, owner string, given map[string]any, v float64) error {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == p.Flag() })
	if !set {
		return nil
	}
	if err := p.validate(owner, v); err != nil {
		return err
	}
	given[p.Name] = v
	return nil
}

func defaultText(p Param) string { return p.Value.Format(p.Value.Default()) }

// valueFlag is the flag of a Value parameter: it parses what it is set to at once (a flag
// error names it) and shows its default as the Value writes it.
type valueFlag struct {
	p     Param
	owner string
	given map[string]any
	text  string
}

func (f *valueFlag) String() string {
	if f == nil {
		return ""
	}
	return f.text
}

func (f *valueFlag) Set(s string) error {
	var v any
	var err error
	sofar, repeated := f.given[f.p.Name]
	if r, ok := f.p.Value.(Repeatable); ok && repeated {
		v, err = r.Add(sofar, s)
		s = f.text + "," + s
	} else {
		v, err = f.p.Value.Parse(s)
	}
	if err != nil {
		return err
	}
	f.text = s
	f.given[f.p.Name] = v
	return nil
}

// Get gives the value as the help shows its default: quoted where the flag takes text.
func (f *valueFlag) Get() any {
	if f.p.Value.TypeName() == "string" {
		return f.text
	}
	return f.p.Value.Default()
}

// Strings is the list of texts a repeatable flag was given (the paths of --input).
func (f *valueFlag) Strings() []string {
	if l, ok := f.given[f.p.Name].([]string); ok {
		return l
	}
	return []string{f.text}
}

// TypeName names the flag's values in help (the flag package would say "value").
func (f *valueFlag) TypeName() string { return f.p.Value.TypeName() }

// ReadYAML reads the values a YAML mapping gives for params (by their names), each checked
// once; owner names the variant and where its keys are in messages ("evaluate.knn"). A key
// that is not a parameter, or one of a command line's only, is refused.
func ReadYAML(owner string, params []Param, n *yaml.Node) (Settings, error) {
	given := map[string]any{}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return NewSettings(params, given), nil
	}
	if n.Kind != yaml.MappingNode {
		return Settings{}, fmt.Errorf("line %d: %s: want a mapping of its settings", n.Line, owner)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		p, ok := Lookup(params, key.Value)
		if !ok || p.Surface == CommandOnly {
			return Settings{}, fmt.Errorf("line %d: %s.%s: unknown setting (want %s)", key.Line, owner, key.Value, strings.Join(configNames(params), ", "))
		}
		text, err := yamlText(val)
		if err != nil {
			return Settings{}, fmt.Errorf("line %d: %s.%s: %w", val.Line, owner, key.Value, err)
		}
		var v any
		if p.Value != nil {
			if v, err = p.Value.Parse(text); err != nil {
				return Settings{}, fmt.Errorf("line %d: %s.%s %s: %w", val.Line, owner, key.Value, text, err)
			}
		} else {
			f, err := p.Parse(text)
			if err != nil {
				return Settings{}, fmt.Errorf("line %d: %s.%w", val.Line, owner, err)
			}
			if reason := p.reason(f); reason != "" {
				return Settings{}, fmt.Errorf("line %d: %s.%s %s: %s", val.Line, owner, key.Value, p.Format(f), reason)
			}
			v = f
		}
		given[p.Name] = v
	}
	return NewSettings(params, given), nil
}

func configNames(params []Param) []string {
	var out []string
	for _, p := range params {
		if p.Surface != CommandOnly {
			out = append(out, p.Name)
		}
	}
	return out
}

// yamlText is a YAML value as text: a scalar's, or a list's items joined by commas.
func yamlText(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, len(n.Content))
		for i, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of values")
			}
			parts[i] = c.Value
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("want a value or a list of values")
}

// MarshalSettings writes the given values of the configuration parameters of s as a JSON
// object, in declaration order, leaving zero values out (as omitempty fields do).
func MarshalSettings(s Settings) ([]byte, error) {
	buf := []byte{'{'}
	for _, p := range s.params {
		v, ok := s.given[p.Name]
		if !ok || p.Surface == CommandOnly || isZero(v) {
			continue
		}
		if p.Value != nil {
			if st, ok := v.(fmt.Stringer); ok {
				v = st.String()
			}
		} else if p.Type == Bool {
			v = v.(float64) != 0
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendQuote(buf, p.Name)
		buf = append(buf, ':')
		buf = append(buf, raw...)
	}
	return append(buf, '}'), nil
}

func isZero(v any) bool {
	r := reflect.ValueOf(v)
	if !r.IsValid() {
		return true
	}
	if r.Kind() == reflect.Slice || r.Kind() == reflect.Map {
		return r.Len() == 0
	}
	return r.IsZero()
}

// UnmarshalSettings reads settings as MarshalSettings writes them.
func UnmarshalSettings(owner string, params []Param, data []byte) (Settings, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Settings{}, fmt.Errorf("%s: %w", owner, err)
	}
	given := map[string]any{}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		p, ok := Lookup(params, key)
		if !ok {
			return Settings{}, fmt.Errorf("%s: unknown setting %s", owner, key)
		}
		if p.Value == nil {
			v, err := p.DecodeJSON(fields[key])
			if err != nil {
				return Settings{}, fmt.Errorf("%s: %w", owner, err)
			}
			given[key] = v
			continue
		}
		v, err := p.DecodeJSONValue(fields[key])
		if err != nil {
			return Settings{}, fmt.Errorf("%s.%s: %w", owner, key, err)
		}
		given[key] = v
	}
	return NewSettings(params, given), nil
}

// DecodeJSONValue reads a JSON value of parameter p as Settings holds it: a number as
// DecodeJSON reads it, a Value's as it parses the value's text (a string's contents, a
// number as written, a list's items joined by commas).
func (p Param) DecodeJSONValue(raw json.RawMessage) (any, error) {
	if p.Value == nil {
		return p.DecodeJSON(raw)
	}
	text, err := jsonText(raw)
	if err != nil {
		return nil, err
	}
	return p.Value.Parse(text)
}

// AppendJSONValue appends a value of parameter p as JSON: a bool's as true or false, a
// number's as a number, a Value's as encoding/json writes it.
func (p Param) AppendJSONValue(buf []byte, v any) ([]byte, error) {
	if p.Value == nil && p.Type == Bool {
		f, _ := v.(float64)
		v = f != 0
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	return append(buf, raw...), nil
}

// jsonText is a JSON value as text: a string's contents, a number as written, a list's items
// joined by commas.
func jsonText(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a seed keeps its 64 bits
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	var text func(any) string
	text = func(v any) string {
		switch x := v.(type) {
		case string:
			return x
		case json.Number:
			return x.String()
		case []any:
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = text(e)
			}
			return strings.Join(parts, ",")
		}
		return fmt.Sprint(v)
	}
	return text(v), nil
}
