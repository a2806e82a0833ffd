package gpu

import (
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

func TestCompiledListsCPUFirst(t *testing.T) {
	got := Compiled()
	if len(got) == 0 || got[0] != CPU {
		t.Fatalf("Compiled() = %v, want cpu first", got)
	}
	if (len(got) == 2) != cuda.Compiled {
		t.Errorf("Compiled() = %v but cuda.Compiled = %v", got, cuda.Compiled)
	}
}
