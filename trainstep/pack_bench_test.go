package trainstep

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPackedStep times K runs of resnet18-cifar at batch 32 (the paper's small batch)
// trained two ways, interleaved in every iteration so that both see the same load: one step
// of each run alone, one after another, and one step of all K in a PackedStep. It reports the
// images a second summed over the K runs each way and their ratio (packed/alone: above 1 is
// packing's gain). -short: width 8, batch 4.
func BenchmarkPackedStep(b *testing.B) {
	for _, k := range []int{2, 4} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			batch := 32
			var steps []*Step
			backend := newTestBackend(b)
			for i := range k {
				cfg := BenchStepConfig(ResNet18CIFAR, 3)
				cfg.InitSeed = uint64(i + 1)
				if testing.Short() {
					cfg.Model.BaseWidth, batch = 8, 4
				}
				s, err := NewStep(backend, cfg, 32, 32)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Finalize()
				steps = append(steps, s)
			}
			batches, lrs := make([]*Batch, k), make([]float64, k)
			for i := range k {
				batches[i], lrs[i] = RandomBatch(uint64(i+1), batch, 32, 32, 3), 0.01
			}
			alone := func() {
				for i, s := range steps {
					if _, err := s.Run(batches[i], lrs[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			alone() // compiles each run's graph
			p, err := NewPackedStep(steps...)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Finalize()
			packed := func() {
				pending, err := p.Launch(batches, lrs)
				if err != nil {
					b.Fatal(err)
				}
				for _, ps := range pending {
					if _, err := ps.Wait(); err != nil {
						b.Fatal(err)
					}
				}
			}
			packed() // compiles the pack's graph
			b.ResetTimer()
			var aloneTime, packedTime time.Duration
			for b.Loop() {
				t0 := time.Now()
				alone()
				t1 := time.Now()
				packed()
				aloneTime, packedTime = aloneTime+t1.Sub(t0), packedTime+time.Since(t1)
			}
			images := float64(b.N) * float64(2*batch*k)
			b.ReportMetric(images/aloneTime.Seconds(), "alone-img/s")
			b.ReportMetric(images/packedTime.Seconds(), "packed-img/s")
			b.ReportMetric(aloneTime.Seconds()/packedTime.Seconds(), "packed/alone")
		})
	}
}
