package verify

import (
	"strings"
	"testing"
)

// TestPackingTable: the packing table gives each row's ratio, and the goal's verdict to the
// row of eight runs at batch 32 on a GPU only (a CPU is compute-bound: packing cannot
// multiply its throughput).
func TestPackingTable(t *testing.T) {
	r := &CheckResult{Packing: []PackingResult{
		{Model: "resnet18-cifar", Size: 32, Batch: 32, Precision: "bf16", Runs: 8, Backend: "cuda", AloneImagesPerSec: 8000, PackedImagesPerSec: 36000, Ratio: 4.5},
		{Model: "resnet18-cifar", Size: 32, Batch: 32, Precision: "tf32", Runs: 8, Backend: "cuda", AloneImagesPerSec: 8000, PackedImagesPerSec: 24000, Ratio: 3},
		{Model: "resnet18-cifar", Size: 32, Batch: 32, Precision: "tf32", Runs: 8, Backend: "cpu", AloneImagesPerSec: 30, PackedImagesPerSec: 31, Ratio: 1.03},
		{Model: "resnet18-cifar", Size: 32, Batch: 32, Precision: "tf32", Runs: 4, Backend: "cuda", Error: "out of memory"},
	}}
	md := r.Markdown()
	for _, want := range []string{
		"| resnet18-cifar | 32 | 32 | bf16 | 8 | 8000 | 36000 | 4.50× (4×: met) |",
		"| resnet18-cifar | 32 | 32 | tf32 | 8 | 8000 | 24000 | 3.00× (4×: **missed**) |",
		"| resnet18-cifar | 32 | 32 | tf32 | 8 | 30 | 31 | 1.03× |",
		"| resnet18-cifar | 32 | 32 | tf32 | 4 | — | failed | — |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the packing table lacks %q:\n%s", want, md)
		}
	}
}
