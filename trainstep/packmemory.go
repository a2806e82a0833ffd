package trainstep

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"

	"github.com/dcl-beam/dcl-beam/gpu/cpu"
)

// TrainMemory estimates the bytes one run's training step of cfg holds on its device at
// batch view pairs of h×w images with channels channels, for deciding how many runs a pack
// may hold. It builds the forward pass of the 2·batch images (a graph that is never compiled
// or run) and counts every value in it, at the step's precision:
//
//	weights, their momentum and gradients (4 bytes each) + 3 × the forward's values
//
// because the backward pass keeps the forward's values, makes a gradient of about each, and
// the allocator's padding and the convolutions' workspace come on top. It is meant to err
// high: a pack that it says fits does.
func TrainMemory(cfg StepConfig, batch, h, w, channels int) (int64, error) {
	if batch < 1 || h < 1 || w < 1 || channels < 1 {
		return 0, fmt.Errorf("no training memory for a batch of %d %dx%dx%d view pairs", batch, h, w, channels)
	}
	cfg.Model.Channels = channels
	cfg.Precision = cfg.Precision.orDefault()
	backend, err := cpu.New(cpu.Config{Threads: 1})
	if err != nil {
		return 0, err
	}
	defer backend.Finalize()
	s, err := NewStep(backend, cfg, h, w)
	if err != nil {
		return 0, err
	}
	defer s.Finalize()
	var weights int64
	for v := range s.store.IterVariables() {
		if v.Trainable {
			weights += int64(v.Shape().Size())
		}
	}
	forward, err := s.forwardBytes(2*batch, h, w)
	if err != nil {
		return 0, err
	}
	return 12*weights + 3*forward, nil
}

// forwardBytes is the sum of the sizes of every value of the step's forward pass in training
// mode on n images.
func (s *Step) forwardBytes(n, h, w int) (total int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("building model %s for %d %dx%d images: %v", s.cfg.Model.Name, n, h, w, r)
		}
	}()
	g := NewGraph(s.backend, "memory_estimate")
	defer g.Finalize()
	images := Parameter(g, "images", shapes.Make(dtypes.Uint8, n, h, w, s.cfg.Model.Channels))
	n0 := s.net(true, false)
	scope := s.store.RootScope()
	s.model.project(n0, scope, s.model.backbone(n0, scope, images))
	for _, node := range g.Nodes() {
		// Nodes of several outputs (batch norm's) have no shape of their own: their outputs
		// are nodes too.
		if sh := node.Shape(); sh.DType != dtypes.InvalidDType {
			total += int64(sh.ByteSize())
		}
	}
	return total, nil
}
