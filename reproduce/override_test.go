package reproduce

import (
	"strings"
	"testing"
)

// --set KEY=VALUE sets a config's key before it is read: a key the config gives, a key it
// does not (with the sections above it), an item of a list; a misspelt key or a value of the
// wrong kind is refused as in the file, saying the overrides were applied; the config records
// them.
func TestOverridesSetConfigKeys(t *testing.T) {
	parse := func(sets ...string) (*Config, error) {
		var os []Override
		for _, s := range sets {
			o, err := ParseOverride(s)
			if err != nil {
				return nil, err
			}
			os = append(os, o)
		}
		return ParseWith(strings.NewReader(minimal), "tiny.yaml", os)
	}
	c, err := parse("train.defaults.epochs=3", "evaluate.linear.epochs=7", "train.runs.0.loss=dcl", "train.sweep.loss=[dcl]")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Runs {
		if r.Epochs() != 3 {
			t.Errorf("run %s: %d epochs, want 3", r.Name, r.Epochs())
		}
	}
	if c.Runs[0].Name != "dclw" || c.Runs[0].Loss() != "dcl" || len(c.Runs) != 3 {
		t.Errorf("runs %v: want the explicit run's loss dcl and the sweep of dcl alone", c.runNames())
	}
	if l, ok := c.Evaluate.Settings("linear"); !ok || l.Int("epochs") != 7 {
		t.Errorf("evaluate.linear: %v, %v; want a linear probe of 7 epochs", l, ok)
	}
	if got := strings.Join(c.Overrides, " "); got != "train.defaults.epochs=3 evaluate.linear.epochs=7 train.runs.0.loss=dcl train.sweep.loss=[dcl]" {
		t.Errorf("overrides recorded %q", got)
	}
	for _, tt := range []struct {
		set  []string
		want string
	}{
		{[]string{"train.defaults.epoch=3"}, "epoch"},
		{[]string{"train.defaults.epochs=three"}, "with --set train.defaults.epochs=three"},
		{[]string{"train.runs.5.loss=dcl"}, `"5" is not an item of a list of 1`},
		{[]string{"name.x=1"}, `"x" is under a value`},
		{[]string{"epochs"}, "want KEY=VALUE"},
	} {
		if _, err := parse(tt.set...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--set %v: %v, want an error with %q", tt.set, err, tt.want)
		}
	}
}
