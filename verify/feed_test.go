package verify

import (
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

// TestFeedingCountsDevices: the reader's target is the step's images/s on one device times
// the devices it feeds (the machine's GPUs, at least one), its ratio is over that product,
// and the report says so.
func TestFeedingCountsDevices(t *testing.T) {
	eight := make([]cuda.GPU, 8)
	for _, tc := range []struct {
		doctor  cuda.Report
		devices int
		demand  float64
		ratio   float64
		cell    string
	}{
		{cuda.Report{}, 1, 1500, 16, "| 1500 (resnet18-cifar/256/bf16) | 16.0× |"},
		{cuda.Report{GPUs: eight[:1]}, 1, 1500, 16, "| 1500 (resnet18-cifar/256/bf16) | 16.0× |"},
		{cuda.Report{GPUs: eight}, 8, 12000, 2, "| 1500 × 8 devices = 12000 (resnet18-cifar/256/bf16) | 2.0× |"},
	} {
		f := FeedResult{FeedSpec: FeedSpec{Name: "32px-raw", Against: "resnet18-cifar/256/bf16"}, ImagesPerSec: 24000}
		f.against(1500, feedDevices(tc.doctor))
		if f.Devices != tc.devices || f.DemandImagesPerSec != tc.demand || f.Ratio != tc.ratio {
			t.Errorf("%d GPUs: devices %d, demand %.0f images/s, ratio %.2f; want %d, %.0f, %.2f",
				len(tc.doctor.GPUs), f.Devices, f.DemandImagesPerSec, f.Ratio, tc.devices, tc.demand, tc.ratio)
		}
		md := (&CheckResult{Feeding: []FeedResult{f}}).Markdown()
		if !strings.Contains(md, tc.cell) || !strings.Contains(md, "| step images/s × devices | reader ÷ (step × devices) (goal ≥ 2) |") {
			t.Errorf("%d GPUs: the feeding table does not say %q under its devices header:\n%s", len(tc.doctor.GPUs), tc.cell, md)
		}
	}
}
