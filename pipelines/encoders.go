package pipelines

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// The encoders a process shares. Every DoFn instance that embeds with one checkpoint on one
// backend, in every pipeline running in the process, and the plan that checked it, use one
// Encoder: the checkpoint is read and the graph compiled once, the CPU's cores are not split
// between several encoders that each want them all, and one GPU is fed by every worker's
// ranges at once (an Encoder is safe for concurrent use). The last user to let go closes it
// and its backend, so a process that embeds with many checkpoints in turn (reproduce) holds
// one at a time.

// encoderKey identifies a shared encoder.
type encoderKey struct {
	Checkpoint string // the resolved checkpoint file
	Kind       gpu.Kind
	Plugin     string
	Threads    int
	TF32       bool // gpu.Options.TF32
}

type sharedEncoder struct {
	ready   chan struct{} // closed once loaded (or failed)
	enc     *trainstep.Encoder
	backend compute.Backend
	kind    gpu.Kind // the backend it runs on (auto resolved)
	err     error
	users   int
}

// encoderLoads counts the encoders loaded in this process (tests check the sharing).
var encoderLoads atomic.Int64

var encoders = struct {
	sync.Mutex
	m map[encoderKey]*sharedEncoder
}{m: map[encoderKey]*sharedEncoder{}}

// acquireEncoder returns the process's encoder for key, loading it if it is not loaded, and
// the function that lets go of it. log gets gpu.New's line on the backend chosen, once per
// load.
func acquireEncoder(ctx context.Context, key encoderKey, log *slog.Logger) (*trainstep.Encoder, func(), error) {
	s, err := acquireShared(ctx, key, log)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return s.enc, func() { once.Do(func() { releaseEncoder(key, s) }) }, nil
}

// borrowEncoder returns the encoder for key that someone in this process holds (the plan of
// the job whose DoFn asks), without holding it: runners need not call a DoFn's Teardown
// (prism in process does not), so a DoFn that held an encoder could keep it, and a GPU's
// memory, until the process ends. The holder outlives the pipeline's DoFns. Where no one
// holds it (a worker in another process), it is acquired, for Teardown to release.
func borrowEncoder(ctx context.Context, key encoderKey, log *slog.Logger) (*trainstep.Encoder, func(), error) {
	encoders.Lock()
	s, ok := encoders.m[key]
	encoders.Unlock()
	if ok {
		<-s.ready
		if s.err == nil {
			return s.enc, func() {}, nil
		}
	}
	return acquireEncoder(ctx, key, log)
}

// encoderKind is the backend the loaded encoder for key runs on ("" when none is loaded).
func encoderKind(key encoderKey) gpu.Kind {
	encoders.Lock()
	s := encoders.m[key]
	encoders.Unlock()
	if s == nil {
		return ""
	}
	<-s.ready
	return s.kind
}

func acquireShared(ctx context.Context, key encoderKey, log *slog.Logger) (*sharedEncoder, error) {
	encoders.Lock()
	s, ok := encoders.m[key]
	if ok {
		s.users++
		encoders.Unlock()
		<-s.ready
		if s.err != nil {
			releaseEncoder(key, s)
			return nil, s.err
		}
		return s, nil
	}
	s = &sharedEncoder{ready: make(chan struct{}), users: 1}
	encoders.m[key] = s
	encoders.Unlock()

	s.backend, s.enc, s.err = loadEncoder(ctx, key, log)
	if s.err == nil {
		s.kind = gpu.KindOf(s.backend)
	}
	close(s.ready)
	if s.err != nil {
		releaseEncoder(key, s)
		return nil, s.err
	}
	return s, nil
}

func loadEncoder(ctx context.Context, key encoderKey, log *slog.Logger) (compute.Backend, *trainstep.Encoder, error) {
	encoderLoads.Add(1)
	be, err := gpu.New(ctx, gpu.Options{Kind: key.Kind, Plugin: key.Plugin, Threads: key.Threads, TF32: key.TF32, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("the encoder's backend: %w", err)
	}
	kind := gpu.KindOf(be)
	// How a call is batched depends on the backend and on the image size (the checkpoint's).
	h, err := trainstep.ReadCheckpointHeader(ctx, key.Checkpoint)
	if err != nil {
		be.Finalize()
		return nil, nil, err
	}
	enc, err := trainstep.LoadEncoderWith(ctx, be, key.Checkpoint, trainstep.EncoderOptionsFor(kind, h.State.ImageHeight, h.State.ImageWidth))
	if err != nil {
		be.Finalize()
		return nil, nil, err
	}
	return be, enc, nil
}

// releaseEncoder lets go of one use of s; the last closes it.
func releaseEncoder(key encoderKey, s *sharedEncoder) {
	encoders.Lock()
	s.users--
	last := s.users == 0
	if last && encoders.m[key] == s {
		delete(encoders.m, key)
	}
	encoders.Unlock()
	if !last || s.err != nil {
		return
	}
	s.enc.Close()
	s.backend.Finalize()
}
