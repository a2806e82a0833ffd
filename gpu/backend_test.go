package gpu

import "testing"

func TestCompiledListsCPUFirst(t *testing.T) {
	got := Compiled()
	if len(got) == 0 || got[0] != CPU {
		t.Fatalf("Compiled() = %v, want cpu first", got)
	}
	if (len(got) == 2) != cudaCompiled {
		t.Errorf("Compiled() = %v but cudaCompiled = %v", got, cudaCompiled)
	}
}
