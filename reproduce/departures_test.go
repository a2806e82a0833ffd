package reproduce

import (
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/pipelines"
)

// The report lists the config's own departures and, beside them, the choices of the toolkit's
// code that apply to the config: the ones it uses (a DCLW run's constant weights, the CIFAR
// stem, the blur of dcl-paper, the fixed-feature probe) and not the ones it does not.
func TestReportPrintsOwnAndToolkitDepartures(t *testing.T) {
	cfg := strings.Replace(minimal, "preprocess: {augment: simclr-cifar,", "departures: {weight_decay: \"5e-4: the paper states none\"}\npreprocess: {augment: simclr-cifar,", 1)
	cfg = strings.Replace(cfg, "  knn: {k: 20, temperature: 0.1}", "  knn: {k: 20, temperature: 0.1}\n  linear: {epochs: 2}", 1)
	c, err := Parse(strings.NewReader(cfg), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	toolkit := c.ToolkitDepartures()
	for _, k := range []string{"reduction", "projector", "schedule", "momentum", "linear"} {
		if !strings.Contains(toolkit[k], "paper") {
			t.Errorf("the toolkit's departures lack %s (or its paper's text): %q", k, toolkit[k])
		}
	}
	for _, k := range []string{"model", "augment", "data", "loss"} { // small-cnn, simclr-cifar has no blur, not ImageNet-100, DCLW's gradient
		if text, ok := toolkit[k]; ok {
			t.Errorf("the toolkit's departures name %s, which this config does not use: %q", k, text)
		}
	}
	res := &Results{Experiment: "tiny", Departures: c.Departures, ToolkitDepartures: toolkit}
	report := markdown(res, nil)
	if !strings.Contains(report, "- **weight_decay**: 5e-4: the paper states none\n") {
		t.Errorf("the report does not print the config's departure:\n%s", report)
	}
	for k, text := range toolkit {
		if !strings.Contains(report, "- **"+k+"** (*toolkit*): "+text+"\n") {
			t.Errorf("the report does not print the toolkit's %s", k)
		}
	}
	// In RecipeSettings' order: the projector before the reduction before the schedule.
	if i, j, k := strings.Index(report, "**projector**"), strings.Index(report, "**reduction**"), strings.Index(report, "**schedule**"); i > j || j > k {
		t.Errorf("the departures are not in RecipeSettings' order:\n%s", report)
	}

	// The augmented probe on CIFAR takes ImageNet's crops, not CIFAR's padded RandomCrop.
	for _, tt := range []struct {
		dataset string
		want    bool
	}{{"cifar10", true}, {"cifar100", true}, {"stl10", false}} {
		c.Dataset.Name = tt.dataset
		c.Evaluate.Set(pipelines.EvalLinear, "crops", pipelines.AugmentedCrops)
		if got := strings.Contains(c.ToolkitDepartures()["linear"], "RandomCrop 32 with padding 4"); got != tt.want {
			t.Errorf("%s: the augmented probe's departure names CIFAR's RandomCrop: %v, want %v: %q", tt.dataset, got, tt.want, c.ToolkitDepartures()["linear"])
		}
	}

	dclPaper := strings.Replace(minimal, "augment: simclr-cifar", "augment: dcl-paper", 1)
	dclPaper = strings.Replace(dclPaper, "{name: dclw, loss: dclw, sigma: 0.5}", "{name: dclw, loss: dclw, sigma: 0.5, dclw_grad: false}", 1)
	dclPaper = strings.Replace(dclPaper, "model: small-cnn", "model: resnet18-cifar", 1)
	c, err = Parse(strings.NewReader(dclPaper), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	toolkit = c.ToolkitDepartures()
	if !strings.Contains(toolkit["augment"], "0.5, 0.5 per view") || !strings.Contains(toolkit["model"], "resnet18-cifar: the CIFAR stem") ||
		!strings.Contains(toolkit["loss"], "dclw's weights w_i are constants") {
		t.Errorf("dcl-paper's blur, resnet18-cifar's stem, DCLW's constant weights: %q, %q, %q", toolkit["augment"], toolkit["model"], toolkit["loss"])
	}
}
