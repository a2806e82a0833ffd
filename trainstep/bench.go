package trainstep

import "math/rand/v2"

// BenchStepConfig is the training step the benchmarks time: model at full width with the
// paper's CIFAR settings (DCL, τ = 0.07, SGD momentum 0.9, weight decay 5e-4). Backend
// engineers time their kernels with it:
//
//	s, _ := trainstep.NewStep(backend, trainstep.BenchStepConfig(trainstep.ResNet18CIFAR, 3), 32, 32)
//	b := trainstep.RandomBatch(1, 64, 32, 32, 3)
//	_, err := s.Run(b, 0.01) // one step: forward and backward of 128 images, update
func BenchStepConfig(model string, channels int) StepConfig {
	paper := PaperDefaults()
	return StepConfig{
		Model:     ModelConfig{Name: model, Channels: channels},
		Loss:      paper.LossConfig(),
		Optimizer: paper.OptimizerConfig(),
		InitSeed:  1,
	}
}

// RandomBatch is n view pairs of uniformly random pixels, reproducible from seed.
func RandomBatch(seed uint64, n, h, w, c int) *Batch {
	r := rand.New(rand.NewPCG(seed, 0))
	b := &Batch{N: n, H: h, W: w, C: c, View1: make([]uint8, n*h*w*c), View2: make([]uint8, n*h*w*c)}
	for i := range b.View1 {
		b.View1[i], b.View2[i] = uint8(r.Uint32()), uint8(r.Uint32())
	}
	return b
}
