package registry

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// Type is the type of a parameter's values.
type Type int

const (
	// Float is a float64 parameter.
	Float Type = iota
	// Int is a whole-number parameter.
	Int
	// Bool is a true/false parameter (held as 0 or 1).
	Bool
)

// Param is one parameter a variant declares. Its name is the configuration key (YAML,
// reproduce's JSON); the command-line flag is the name with '-' for '_'; checkpoints store
// it under JSON (the name unless an older checkpoint format spelt it otherwise).
type Param struct {
	Name string
	// JSON is the key checkpoints store the value under ("": Name).
	JSON string
	Type Type
	// Default is the value where a configuration leaves the parameter out (bools: 0 or 1).
	Default float64
	// Doc says what the parameter is, for help text.
	Doc string
	// Check says what is wrong with a value ("" when it is fine); nil accepts any finite
	// value. It runs once, where a configuration's values are resolved (Resolve).
	Check func(v float64) string

	// Value, where set, is the form of a parameter whose values are not one number (a word,
	// a path, a seed, a list, a pair): it holds the default and checks what it reads, and
	// Type, Default and Check are unused. Such a parameter is one of Settings, not Values.
	Value Value
	// FlagName is the command-line flag where it is not Name with '-' for '_' (a flag whose
	// name is older than the configuration key, or the other way round).
	FlagName string
	// Surface says where the parameter is given: a flag and a configuration key (the
	// default), or a flag only.
	Surface Surface
	// Required says a command line must give the flag.
	Required bool
	// Renamed is an older name of the flag that still sets it, with a notice.
	Renamed string
	// CheckValue says what is wrong with a Value's value, as Check does of a number's; nil
	// accepts what Value parses. It runs where Reason is asked (a whole configuration's
	// check), not while parsing.
	CheckValue func(v any) string
	// ZeroIsDefault says a configuration's zero (0, "", false) stands for the default: it is
	// not a value given, and JSON leaves it out as an omitempty field. A command line's flag
	// set to zero is still that value.
	ZeroIsDefault bool
}

// Flag is the parameter's command-line flag name.
func (p Param) Flag() string { return cmpOr(p.FlagName, strings.ReplaceAll(p.Name, "_", "-")) }

// JSONName is the key checkpoints store the parameter under.
func (p Param) JSONName() string { return cmpOr(p.JSON, p.Name) }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Format writes a value as its type reads (flags, messages).
func (p Param) Format(v float64) string {
	switch p.Type {
	case Bool:
		return strconv.FormatBool(v != 0)
	case Int:
		if math.Abs(v) < 1<<63 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'f', 0, 64) // int64 would wrap
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Parse reads a value written as text (a flag, a YAML scalar), refusing one that is not of
// the parameter's type.
func (p Param) Parse(s string) (float64, error) {
	f, err := p.parseNumber(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Name, err)
	}
	return f, nil
}

// parseNumber is Parse without the parameter's name in the error.
func (p Param) parseNumber(s string) (float64, error) {
	switch p.Type {
	case Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return 0, fmt.Errorf("%s: want true or false", s)
		}
		return boolValue(b), nil
	case Int:
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, fmt.Errorf("%s is not a whole number", s)
		}
		return f, nil
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s is not a finite number", s)
	}
	return f, nil
}

// ParseText reads a value of the parameter written as text, as its type reads it (a number
// as float64, a Value's own), without its check (Reason): for a value that is checked only
// with others (a whole configuration). The error does not name the parameter.
func (p Param) ParseText(text string) (any, error) {
	if p.Value != nil {
		return p.Value.Parse(text)
	}
	return p.parseNumber(text)
}

// Reason says what is wrong with a value of the parameter ("" when it is fine): its type's
// bounds and its Check, or CheckValue for a Value's.
func (p Param) Reason(v any) string {
	if p.Value != nil {
		if p.CheckValue == nil {
			return ""
		}
		return p.CheckValue(v)
	}
	f, _ := v.(float64)
	return p.reason(f)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// validate checks v against the parameter's type and Check; the error is a
// usage.ValueError named by the flag, so a command line reports it as the flag and a
// config as the key of the same meaning.
func (p Param) validate(owner string, v float64) error {
	reason := p.reason(v)
	if reason == "" {
		return nil
	}
	return usage.Value(p.Flag(), p.Format(v), "%s: %s", owner, reason)
}

// reason says what is wrong with v ("" when it is fine).
func (p Param) reason(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "not a finite number"
	case p.Type == Int && v != math.Trunc(v):
		return "not a whole number"
	case p.Type == Int && math.Abs(v) > 1<<53:
		// Values are float64s: past 2⁵³ they are no longer every whole number, and past 2⁶³
		// a conversion to int wraps to a negative number.
		return "not a whole number between -2⁵³ and 2⁵³"
	case p.Type == Bool && v != 0 && v != 1:
		return "want true or false"
	case p.Check != nil:
		return p.Check(v)
	}
	return ""
}

// Positive is a Check: the value must be greater than 0.
func Positive(v float64) string {
	if v > 0 {
		return ""
	}
	return "must be a positive number"
}

// AtLeast is a Check: the value must be at least lo.
func AtLeast(lo float64) func(float64) string {
	return func(v float64) string {
		if v >= lo {
			return ""
		}
		return "must be at least " + strconv.FormatFloat(lo, 'g', -1, 64)
	}
}

// InRange is a Check: lo ≤ value < hi.
func InRange(lo, hi float64) func(float64) string {
	return func(v float64) string {
		if v >= lo && v < hi {
			return ""
		}
		return fmt.Sprintf("must be in [%g, %g)", lo, hi)
	}
}

// Values are parameter values by name; a parameter left out takes its default.
type Values map[string]float64

// Float is the value of name (0 when absent).
func (v Values) Float(name string) float64 { return v[name] }

// Int is the value of name as a whole number.
func (v Values) Int(name string) int { return int(v[name]) }

// Bool is the value of name as true or false.
func (v Values) Bool(name string) bool { return v[name] != 0 }

// Resolve returns the values of the declared params: given where given (each checked once,
// the error naming the owner, the parameter and the value), else the default. A given value
// of a parameter that is not declared is refused when strict, else left out (a setting of
// another variant, as a config's defaults hold for every loss of a sweep).
func Resolve(owner string, declared []Param, given Values, strict bool) (Values, error) {
	if strict {
		for _, name := range sortedKeys(given) {
			if !slices.ContainsFunc(declared, func(p Param) bool { return p.Name == name }) {
				names := make([]string, len(declared))
				for i, p := range declared {
					names[i] = p.Name
				}
				reads := "none"
				if len(names) > 0 {
					reads = strings.Join(names, ", ")
				}
				return nil, fmt.Errorf("%s has no setting %s (it reads %s)", owner, name, reads)
			}
		}
	}
	for _, p := range declared {
		if v, ok := given[p.Name]; ok {
			if err := p.validate(owner, v); err != nil {
				return nil, err
			}
		}
	}
	return Fill(declared, given), nil
}

// Fill returns the values of the declared params, given where given and else the default,
// without checking them (Resolve checks).
func Fill(declared []Param, given Values) Values {
	out := make(Values, len(declared))
	for _, p := range declared {
		if v, ok := given[p.Name]; ok {
			out[p.Name] = v
		} else {
			out[p.Name] = p.Default
		}
	}
	return out
}

func sortedKeys(v Values) []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Variant is one registered variant's name and declared parameters, as flags and config
// keys are derived from them.
type Variant struct {
	Name   string
	Params []Param
}

// Merge returns the parameters the variants declare, one per name, in order of first
// declaration. It panics when two variants declare one name with different types or JSON
// keys (a programming error: one flag and one config key cannot hold both).
func Merge(variants []Variant) []Param {
	var out []Param
	for _, v := range variants {
		for _, p := range v.Params {
			i := slices.IndexFunc(out, func(q Param) bool { return q.Name == p.Name })
			if i < 0 {
				out = append(out, p)
				continue
			}
			if out[i].Type != p.Type || out[i].JSONName() != p.JSONName() {
				panic(fmt.Sprintf("registry: parameter %s of %s is declared elsewhere with another type or JSON key", p.Name, v.Name))
			}
		}
	}
	return out
}

// Lookup finds a parameter by name in params.
func Lookup(params []Param, name string) (Param, bool) {
	i := slices.IndexFunc(params, func(p Param) bool { return p.Name == name })
	if i < 0 {
		return Param{}, false
	}
	return params[i], true
}

// AddFlags registers one flag for every parameter the variants declare (merged by name),
// its help the doc of each variant that reads it and its default; noun names a variant in
// the help ("method"). The returned function, called after parsing, gives the values of
// the flags the command line set: those it left out take each variant's default (Resolve),
// as does 0 for a flag whose variants' defaults differ.
func AddFlags(fs *flag.FlagSet, noun string, variants []Variant) func() Values {
	type entry struct {
		param     Param
		value     func() float64
		zeroUnset bool
	}
	var entries []entry
	for _, p := range Merge(variants) {
		var docs, defaults []string
		same := true
		first := math.NaN()
		for _, v := range variants {
			q, ok := Lookup(v.Params, p.Name)
			if !ok {
				continue
			}
			docs = append(docs, v.Name+": "+q.Doc)
			defaults = append(defaults, v.Name+" "+q.Format(q.Default))
			if math.IsNaN(first) {
				first = q.Default
			}
			same = same && q.Default == first
		}
		help := strings.Join(docs, "; ")
		def := first
		if !same {
			// No one default fits every variant: 0 stands for each one's own.
			help += " (0: the " + noun + "'s default: " + strings.Join(defaults, ", ") + ")"
			def = 0
		}
		var value func() float64
		switch p.Type {
		case Bool:
			b := fs.Bool(p.Flag(), def != 0, help)
			value = func() float64 { return boolValue(*b) }
		case Int:
			n := fs.Int(p.Flag(), int(def), help)
			value = func() float64 { return float64(*n) }
		default:
			f := fs.Float64(p.Flag(), def, help)
			value = func() float64 { return *f }
		}
		entries = append(entries, entry{p, value, !same})
	}
	return func() Values {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		out := Values{}
		for _, e := range entries {
			if v := e.value(); set[e.param.Flag()] && !(e.zeroUnset && v == 0) {
				out[e.param.Name] = v
			}
		}
		return out
	}
}

// AppendJSON appends `,"key":value` for each of params that v holds, in params' order, under
// each one's JSON key; with omitZero, zero values are left out.
func AppendJSON(buf []byte, params []Param, v Values, omitZero bool) ([]byte, error) {
	for _, p := range params {
		x, ok := v[p.Name]
		if !ok || (omitZero && x == 0) {
			continue
		}
		var raw []byte
		var err error
		switch p.Type {
		case Bool:
			raw, err = json.Marshal(x != 0)
		default:
			raw, err = json.Marshal(x)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		buf = append(buf, ',')
		buf = strconv.AppendQuote(buf, p.JSONName())
		buf = append(buf, ':')
		buf = append(buf, raw...)
	}
	return buf, nil
}

// DecodeJSON reads a JSON value of parameter p (a number, or true/false for a bool).
func (p Param) DecodeJSON(raw json.RawMessage) (float64, error) {
	if p.Type == Bool {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return 0, fmt.Errorf("%s: want true or false, got %s", p.JSONName(), raw)
		}
		return boolValue(b), nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%s: want a number, got %s", p.JSONName(), raw)
	}
	if p.Type == Int && f != math.Trunc(f) {
		return 0, fmt.Errorf("%s: %s is not a whole number", p.JSONName(), raw)
	}
	return f, nil
}

// ByJSONName finds a parameter by its checkpoint key, in any letter case (encoding/json
// matches struct fields so, and older checkpoints spelt some keys as Go field names).
func ByJSONName(params []Param, key string) (Param, bool) {
	i := slices.IndexFunc(params, func(p Param) bool { return strings.EqualFold(p.JSONName(), key) })
	if i < 0 {
		return Param{}, false
	}
	return params[i], true
}
