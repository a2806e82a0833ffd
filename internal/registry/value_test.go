package registry

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// testParams are one of each kind of declaration Settings holds.
func testParams() []Param {
	return []Param{
		{Name: "input", Value: Text(""), Doc: "what to read", Surface: CommandOnly, Required: true},
		{Name: "k", Type: Int, Default: 200, Doc: "neighbours", Check: AtLeast(1)},
		{Name: "batch_sizes", Value: Ints(nil, func(v []int) string {
			if slices.Min(v) < 2 {
				return "want at least 2"
			}
			return ""
		}), Doc: "sizes"},
		{Name: "samples", FlagName: "max-batches", Type: Int, Doc: "at most this many"},
		{Name: "seed", Value: Uint(1), Doc: "seed"},
		{Name: "scale", Value: Floats([2]float64{0.08, 1}, 2, nil), Doc: "range"},
	}
}

// A command line's flags come from the declarations (a Value's with its own type name and
// default), each value is checked once where the settings are collected, and Settings tell
// the given values from the defaults.
func TestSettingFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	collect := SettingFlags(fs, "toy", testParams())
	if f := fs.Lookup("max-batches"); f == nil || fs.Lookup("samples") != nil {
		t.Fatal("samples is not the flag --max-batches")
	}
	if f := fs.Lookup("seed"); f.DefValue != "1" || f.Value.(interface{ TypeName() string }).TypeName() != "uint" {
		t.Errorf("--seed: default %q, want 1 of type uint", f.DefValue)
	}
	if err := fs.Parse([]string{"--input=a", "--batch-sizes=8,16", "--seed=18446744073709551615", "--scale=0.2,0.9"}); err != nil {
		t.Fatal(err)
	}
	s, err := collect()
	if err != nil {
		t.Fatal(err)
	}
	if s.String("input") != "a" || s.Int("k") != 200 || !slices.Equal(s.IntList("batch_sizes"), []int{8, 16}) ||
		s.Uint("seed") != 1<<64-1 || s.Get("scale") != [2]float64{0.2, 0.9} {
		t.Errorf("settings %v: input %q k %d sizes %v seed %d scale %v", s.GivenNames(), s.String("input"), s.Int("k"), s.IntList("batch_sizes"), s.Uint("seed"), s.Get("scale"))
	}
	if got := s.GivenNames(); !slices.Equal(got, []string{"input", "batch_sizes", "seed", "scale"}) {
		t.Errorf("given %v", got)
	}

	for _, tc := range []struct{ args, want string }{
		{"--k=0", "--k=0: toy: must be at least 1"},
		{"--batch-sizes=1,4", "want at least 2"},
		{"--scale=0.2", "want 2 comma-separated numbers, got 1"},
		{"--seed=-1", "not a whole number of 0 or more"},
		// A whole number past 2⁶³ would wrap to a negative one where it becomes an int.
		{"--k=9223372036854775807", "--k=9223372036854775808: toy: not a whole number between -2⁵³ and 2⁵³"},
		{"--max-batches=9007199254740995", "not a whole number between"},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		collect := SettingFlags(fs, "toy", testParams())
		err := fs.Parse([]string{tc.args})
		if err == nil {
			_, err = collect()
			if err != nil && !usage.Is(err) {
				t.Errorf("%s: %v is not a usage error", tc.args, err)
			}
			err = errors.New(usage.FlagText(err, func(name string) bool { return fs.Lookup(name) != nil }))
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A config's section is read with the same declarations: keys by name, lists as YAML lists,
// the checks of the flags, command-only parameters refused; its JSON holds the given
// non-zero values in declaration order and reads back the same.
func TestSettingsYAMLAndJSON(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("{seed: 7, batch_sizes: [32, 64], samples: 0, k: 20, scale: [0.5, 1]}"), &doc); err != nil {
		t.Fatal(err)
	}
	s, err := ReadYAML("evaluate.toy", testParams(), doc.Content[0])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := MarshalSettings(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"k":20,"batch_sizes":[32,64],"seed":7,"scale":[0.5,1]}`; string(raw) != want {
		t.Errorf("JSON %s, want %s", raw, want)
	}
	back, err := UnmarshalSettings("evaluate.toy", testParams(), raw)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := MarshalSettings(back); string(again) != string(raw) || back.Uint("seed") != 7 {
		t.Errorf("read back as %s", again)
	}
	for give, want := range map[string]string{
		"{k: 0}":              "evaluate.toy.k 0: must be at least 1",
		"{k: 2.5}":            "evaluate.toy.k: 2.5 is not a whole number",
		"{batch_sizes: [1]}":  "evaluate.toy.batch_sizes 1: want at least 2",
		"{input: a}":          "evaluate.toy.input: unknown setting (want k, batch_sizes, samples, seed, scale)",
		"{scale: {a: 1}}":     "evaluate.toy.scale: want a value or a list of values",
		"[1, 2]":              "evaluate.toy: want a mapping of its settings",
		"{max-batches: 3}":    "evaluate.toy.max-batches: unknown setting",
		"{seed: 1.5}":         "evaluate.toy.seed 1.5:",
		"{batch_sizes: [a]}":  `"a" is not a whole number`,
		"{scale: [1, 2, 3]}":  "want 2 comma-separated numbers, got 3",
		"{samples: .nan}":     "evaluate.toy.samples: .nan is not a whole number",
		"{seed: 99999999999}": "",
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(give), &n); err != nil {
			t.Fatal(err)
		}
		_, err := ReadYAML("evaluate.toy", testParams(), n.Content[0])
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", give, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", give, err, want)
		}
	}
}
