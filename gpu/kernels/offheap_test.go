package kernels

import (
	"testing"
	"unsafe"
)

func TestOffHeapReusesTheSmallestFittingWorkspace(t *testing.T) {
	var o offHeap
	big, small := o.get(5000), o.get(100)
	for i := range big {
		big[i] = float32(i)
	}
	if big[4999] != 4999 {
		t.Fatal("a workspace does not keep what is written")
	}
	bigAt, smallAt := unsafe.SliceData(big), unsafe.SliceData(small)
	o.put(big)
	o.put(small)
	if got := o.get(50); unsafe.SliceData(got) != smallAt || len(got) != 50 {
		t.Errorf("get(50) did not reuse the small workspace")
	}
	if got := o.get(3000); unsafe.SliceData(got) != bigAt || len(got) != 3000 {
		t.Errorf("get(3000) did not reuse the large workspace")
	}
	if got := o.get(3000); unsafe.SliceData(got) == bigAt {
		t.Errorf("a workspace in use was handed out twice")
	}
}
