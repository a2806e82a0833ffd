package cuda

import "testing"

// TestTF32OptionIsExplicit: the option reaches go-xla both ways; an empty string would leave
// go-xla's own default, TF32 on, for a float32 run.
func TestTF32OptionIsExplicit(t *testing.T) {
	for _, tc := range []struct {
		give bool
		want string
	}{{false, ",tf32=false"}, {true, ",tf32=true"}} {
		if got := tf32Option(tc.give); got != tc.want {
			t.Errorf("tf32Option(%v) = %q, want %q", tc.give, got, tc.want)
		}
	}
}
