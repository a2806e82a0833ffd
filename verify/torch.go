package verify

import (
	"encoding/json"
	"fmt"
	"os"
)

// TorchResult is what scripts/torch_step.py writes.
type TorchResult struct {
	Torch       string     `json:"torch"`
	Torchvision string     `json:"torchvision,omitempty"`
	CUDA        string     `json:"cuda,omitempty"`
	CuDNN       string     `json:"cudnn,omitempty"`
	GPU         string     `json:"gpu,omitempty"`
	Command     string     `json:"command,omitempty"`
	Rows        []TorchRow `json:"rows"`
	Error       string     `json:"error,omitempty"`
}

// TorchRow is one PyTorch training-step measurement.
type TorchRow struct {
	Model     string `json:"model"`
	Size      int    `json:"size"`
	Batch     int    `json:"batch"`
	Precision string `json:"precision"`
	TF32      bool   `json:"tf32"`
	// Compiled is a torch.compile row (model and loss compiled, the optimiser eager);
	// FirstStepSeconds its compilation with the first step.
	Compiled         bool    `json:"compiled,omitempty"`
	FirstStepSeconds float64 `json:"first_step_seconds,omitempty"`
	ChannelsLast     bool    `json:"channels_last"`
	MedianMs         float64 `json:"median_ms"`
	ImagesPerSec     float64 `json:"images_per_sec"`
	// MaxAllocatedMiB and MaxReservedMiB are torch.cuda.max_memory_allocated and
	// max_memory_reserved; ProcessMiB is nvidia-smi's figure for the process (context
	// included), comparable with the dcl rows' peak.
	MaxAllocatedMiB float64 `json:"max_memory_allocated_mib"`
	MaxReservedMiB  float64 `json:"max_memory_reserved_mib"`
	ProcessMiB      float64 `json:"process_memory_mib,omitempty"`
	Loss            float64 `json:"last_loss"`
	Error           string  `json:"error,omitempty"`
}

func readTorch(path string) (*TorchResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t TorchResult
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("reading PyTorch's results %s: %w", path, err)
	}
	return &t, nil
}

// find returns the PyTorch row measuring what s measures, eager or compiled.
func (t *TorchResult) find(s SpeedResult, compiled bool) *TorchRow {
	if t == nil {
		return nil
	}
	for i, r := range t.Rows {
		if r.Model == s.Model && r.Size == s.Size && r.Batch == s.Batch && r.Precision == s.Precision && r.Compiled == compiled {
			return &t.Rows[i]
		}
	}
	return nil
}
