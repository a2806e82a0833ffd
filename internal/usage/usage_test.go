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

// TestFlagText: out-of-range values read as the flags that set them, wrapped or joined; a
// value no flag sets keeps its name.
func TestFlagText(t *testing.T) {
	isFlag := func(name string) bool { return name == "epochs" || name == "view-size" }
	tests := []struct {
		give error
		want string
	}{
		{Value("epochs", -1, "want at least 1"), "--epochs=-1: want at least 1"},
		{fmt.Errorf("run: %w", Value("epochs", 0, "want at least %d", 1)), "run: --epochs=0: want at least 1"},
		{errors.Join(Value("view-size", -3, "must be in 1..8192"), Value("hue", 0.7, "must be in [0, 0.5]")),
			"--view-size=-3: must be in 1..8192\nhue 0.7: must be in [0, 0.5]"},
		{io.EOF, "EOF"},
	}
	for _, tt := range tests {
		if got := FlagText(tt.give, isFlag); got != tt.want {
			t.Errorf("FlagText(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
