package main

import (
	"strings"
	"testing"
)

// TestAbsurdWidthAndQueueAreUsageErrors: a width or a queue that cannot fit in this
// machine's memory exits 2 in one line naming the bound, instead of dying out of memory.
func TestAbsurdWidthAndQueueAreUsageErrors(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 12, 8, 2)
	base := []string{"train", "--input", data, "--output", out, "--model", "small-cnn", "--batch-size", "4", "--epochs", "1", "--backend", "cpu"}
	for _, tt := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--width=100000"}, "--width=100000: small-cnn at this width needs more than"},
		{[]string{"--method=moco", "--queue-size=2000000000"}, "--queue-size=2000000000: a queue this long needs more than"},
	} {
		code, _, stderr := runDCL(append(append([]string{}, base...), tt.extra...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "which fits") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("dcl train %q exited %d: %q; want 2 and one line with %q", tt.extra, code, stderr, tt.want)
		}
	}
}
