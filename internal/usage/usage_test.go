package usage

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestIsSeesThroughWrapping(t *testing.T) {
	tests := []struct {
		give error
		want bool
	}{
		{Errorf("--views=%d: want 1 or 2", 3), true},
		{fmt.Errorf("planning: %w", Errorf("bad split")), true},
		{Errorf("reading: %w", io.EOF), true},
		{io.EOF, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := Is(tt.give); got != tt.want {
			t.Errorf("Is(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
	if err := Errorf("reading: %w", io.EOF); !errors.Is(err, io.EOF) {
		t.Errorf("Errorf does not wrap: %v", err)
	}
}
