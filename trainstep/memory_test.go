package trainstep

import (
	"strings"
	"testing"
)

// TestAbsurdSettingsAreRefusedByMemory: a width, a projection, a prediction head or a queue that cannot fit in the machine's
// memory is refused before anything is allocated, naming the largest value that would fit;
// the paper's settings fit a small machine.
func TestAbsurdSettingsAreRefusedByMemory(t *testing.T) {
	const gib = 1 << 30
	model := func(name string, width int) *Model {
		m, err := NewModel(ModelConfig{Name: name, BaseWidth: width, Channels: 3, Dataset: "cifar10"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	projected := func(dim int) *Model {
		m, err := NewModel(ModelConfig{Name: ResNet18CIFAR, ProjectionDim: dim, Channels: 3, Dataset: "cifar10"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	moco := StepConfig{Method: "moco", MethodConfig: MethodConfig{SettingQueueSize: 2_000_000_000}}
	tests := []struct {
		name  string
		m     *Model
		cfg   StepConfig
		batch int
		mem   int64
		want  string
	}{
		{"paper's ResNet-18", model(ResNet18CIFAR, 0), StepConfig{}, 512, 4 * gib, ""},
		{"paper's ResNet-50 with MoCo's 65536 keys", model(ResNet50, 0), StepConfig{Method: "moco", MethodConfig: MethodConfig{SettingQueueSize: 65536}}, 256, 4 * gib, ""},
		{"width 100000", model(ResNet18CIFAR, 100000), StepConfig{}, 256, 24 * gib, "--width=100000: resnet18-cifar at this width needs more than 7.0 TiB"},
		{"width 100000 names the largest", model(ResNet18CIFAR, 100000), StepConfig{}, 256, 24 * gib, "fits a width of at most 5792"},
		{"queue 2e9", model(ResNet18CIFAR, 0), moco, 256, 24 * gib, "--queue-size=2000000000: a queue this long needs more than 2.8 TiB"},
		{"projection 2e9", projected(2_000_000_000), StepConfig{}, 256, 24 * gib, "--projection-dim=2000000000: a projection this wide needs more than 11.2 TiB"},
		{"projection 2e9 names the largest", projected(2_000_000_000), StepConfig{}, 256, 24 * gib, "fits a projection dimension of at most 4194304"},
		{"NNCLR's paper head", model(ResNet18CIFAR, 0), StepConfig{Method: NNCLRMethod}, 256, 4 * gib, ""},
		{"NNCLR's head 2e9 wide", model(ResNet18CIFAR, 0), StepConfig{Method: NNCLRMethod, MethodConfig: MethodConfig{SettingPredictorHidden: 2_000_000_000}}, 256, 24 * gib,
			"--predictor-hidden=2000000000: a prediction head this wide needs more than 5.6 TiB"},
	}
	for _, tt := range tests {
		err := checkMemory(tt.m, tt.cfg, tt.batch, tt.mem)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
