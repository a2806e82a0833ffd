package cpu

import (
	"math/rand/v2"
	"sync"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// TestConcurrentExecutions runs one compiled graph (convolution, batch norm, fused chains,
// matrix product) from several goroutines at once, as Beam workers share an encoder, and
// checks every result equals the sequential one.
func TestConcurrentExecutions(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(91, 92))
	xt, _ := randTensor(r, 4, 8, 8, 16)
	kt, _ := randTensor(r, 3, 3, 16, 16)
	wt, _ := randTensor(r, 16, 10)
	st, _ := randTensor(r, 16)
	exec, err := NewExec(be, func(in []*Node) []*Node {
		y := Convolve(in[0], in[1]).StridePerAxis(1, 1).PadSame().Done()
		y, _, _ = InternalBatchNormForTraining(y, in[3], in[3], 1e-3, -1)
		y = Max(y, ZerosLike(y))
		return []*Node{DotProduct(ReduceMean(y, 1, 2), in[2])}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	run := func() []float32 {
		outs, err := exec.Call(xt, kt, wt, st)
		if err != nil {
			t.Error(err)
			return nil
		}
		defer outs[0].MustFinalizeAll()
		return tensors.MustCopyFlatData[float32](outs[0])
	}
	want := run()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if got := run(); got != nil {
					assertClose(t, "concurrent result", got, want, 0)
				}
			}
		}()
	}
	wg.Wait()
}
