package cpu

import (
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// BackendName is the name under which the backend registers with GoMLX:
// GOMLX_BACKEND=dclcpu (or dclcpu:threads=N) selects it in backends.New.
const BackendName = "dclcpu"

func init() {
	backends.Register(BackendName, func(config string) (backends.Backend, error) {
		cfg, err := ParseConfig(config)
		if err != nil {
			return nil, err
		}
		return New(cfg)
	})
}

// Config sets up a Backend.
type Config struct {
	// Threads is the number of goroutines the kernels use, the caller's included; 0 means
	// runtime.GOMAXPROCS(0).
	Threads int
	// ProfileOps makes the backend time every operation it runs (see Backend.OpStats).
	ProfileOps bool
	// NoFusion turns off the fusion of element-wise operations (for comparisons and tests).
	NoFusion bool
	// NoRemat turns off rematerialisation (recomputing cheap element-wise values where they
	// are read late instead of keeping them; see remat.go), for comparisons and tests.
	NoRemat bool
}

// ParseConfig reads a GoMLX backend configuration string: empty, or "threads=N".
func ParseConfig(config string) (Config, error) {
	var cfg Config
	for _, part := range strings.Split(config, ",") {
		if part == "" {
			continue
		}
		key, value, _ := strings.Cut(part, "=")
		switch key {
		case "threads":
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				return cfg, fmt.Errorf("backend %s: threads=%q: want a number ≥ 0", BackendName, value)
			}
			cfg.Threads = n
		default:
			return cfg, fmt.Errorf("backend %s: unknown option %q (known: threads=N)", BackendName, key)
		}
	}
	return cfg, nil
}

// Backend implements backends.Backend. Buffers are SimpleGo's, so tensors move between the
// two without copies; its DataInterface methods are SimpleGo's.
type Backend struct {
	backends.DataInterface
	sg    backends.Backend
	pool  *kernels.Pool
	stats *opStats // nil unless Config.ProfileOps
	// noFusion turns off element-wise fusion (Config.NoFusion).
	noFusion bool
	// noRemat turns off rematerialisation (Config.NoRemat).
	noRemat bool
	// onConv, when set (by benchmarks), sees every convolution the builders lower.
	onConv func(kernels.ConvShape)
	// bufs keeps large released buffers for reuse.
	bufs bufferPool
	// poisonReused, set by tests, fills reused float32 buffers with NaNs.
	poisonReused bool
	// onCompile, when set (by tests), sees each executable Compile makes.
	onCompile func(*Executable)

	mu        sync.Mutex
	finalized bool
}

var _ backends.Backend = (*Backend)(nil)

// New returns a backend whose kernels run on cfg.Threads goroutines.
func New(cfg Config) (*Backend, error) {
	// One operation at a time in SimpleGo: its parallel scheduler deadlocked on 2-core machines,
	// and our executor already runs one operation at a time with the cores inside it.
	sg, err := simplego.New("ops_sequential")
	if err != nil {
		return nil, fmt.Errorf("creating the SimpleGo backend: %w", err)
	}
	threads := cfg.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	be := &Backend{DataInterface: sg, sg: sg, pool: kernels.NewPool(threads), noFusion: cfg.NoFusion, noRemat: cfg.NoRemat}
	if cfg.ProfileOps {
		be.stats = &opStats{}
	}
	return be, nil
}

// Name implements backends.Backend.
func (be *Backend) Name() string { return BackendName }

// String implements backends.Backend.
func (be *Backend) String() string { return BackendName }

// Description implements backends.Backend.
func (be *Backend) Description() string {
	return fmt.Sprintf("dcl-beam CPU backend: SimpleGo with packed %s kernels on %d threads", kernels.KernelName(), be.pool.Threads())
}

// Threads is the number of goroutines the kernels use.
func (be *Backend) Threads() int { return be.pool.Threads() }

// NumDevices implements backends.Backend: one CPU device.
func (be *Backend) NumDevices() int { return 1 }

// DeviceDescription implements backends.Backend.
func (be *Backend) DeviceDescription(backends.DeviceNum) string {
	return fmt.Sprintf("cpu (%d threads, %s)", be.pool.Threads(), kernels.KernelName())
}

// nativeOps are the operations this backend implements itself (for float32; other dtypes go
// to SimpleGo where it has them).
var nativeOps = []backends.OpType{
	backends.OpTypeConvGeneral, backends.OpTypeDotGeneral, backends.OpTypeDot,
	backends.OpTypeReverse, backends.OpTypePad,
	backends.OpTypeSelectAndScatterMax, backends.OpTypeSelectAndScatterMin,
	backends.OpTypeBatchNormForInference, backends.OpTypeBatchNormForTraining, backends.OpTypeBatchNormGradient,
}

// Capabilities implements backends.Backend: SimpleGo's, plus the operations added here.
func (be *Backend) Capabilities() backends.Capabilities {
	c := be.sg.Capabilities().Clone()
	for _, op := range nativeOps {
		c.Operations[op] = true
	}
	return c
}

// Builder implements backends.Backend.
func (be *Backend) Builder(name string) backends.Builder {
	return &Builder{backend: be, name: name}
}

// Finalize implements backends.Backend: it stops the worker pool and releases SimpleGo's.
func (be *Backend) Finalize() {
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.finalized {
		return
	}
	be.finalized = true
	be.pool.Close()
	be.releaseToSimpleGo(be.bufs.drain())
	be.sg.Finalize()
}

// IsFinalized implements backends.Backend.
func (be *Backend) IsFinalized() bool {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.finalized
}

// newF32 returns a new float32 buffer of the shape and its data (not zeroed).
func (be *Backend) newF32(shape shapes.Shape) (backends.Buffer, []float32, error) {
	buf, flat, err := be.newBuffer(shape)
	if err != nil {
		return nil, nil, err
	}
	return buf, flat.([]float32), nil
}

// f32 returns a float32 buffer's data.
func (be *Backend) f32(buf backends.Buffer) []float32 {
	flat, err := be.sg.BufferData(buf)
	if err != nil {
		panic(fmt.Sprintf("dclcpu: reading a buffer: %v", err))
	}
	return flat.([]float32)
}

// newBuffer returns a new buffer of any dtype and its flat data slice (not zeroed): a kept one
// of the shape when the pool has one.
func (be *Backend) newBuffer(shape shapes.Shape) (backends.Buffer, any, error) {
	if buf := be.bufs.get(shape); buf != nil {
		flat, err := be.sg.BufferData(buf)
		if err != nil {
			return nil, nil, err
		}
		if be.poisonReused {
			poison(flat)
		}
		return buf, flat, nil
	}
	return be.sg.NewSharedBuffer(0, shape)
}

// poison fills float32 data with NaNs (tests: a reused buffer's stale contents must not matter).
func poison(flat any) {
	if f, ok := flat.([]float32); ok {
		nan := float32(math.NaN())
		for i := range f {
			f[i] = nan
		}
	}
}

// clone copies a buffer into a new one.
func (be *Backend) clone(buf backends.Buffer) (backends.Buffer, error) {
	shape, err := be.sg.BufferShape(buf)
	if err != nil {
		return nil, err
	}
	out, flat, err := be.newBuffer(shape)
	if err != nil {
		return nil, err
	}
	if err := be.sg.BufferToFlatData(buf, flat); err != nil {
		return nil, err
	}
	return out, nil
}

// release gives a buffer back: large ones to the backend's pool, the others (and those the pool
// has no room for) to SimpleGo's.
func (be *Backend) release(buf backends.Buffer) {
	if buf != nil {
		_ = be.finalizeBuffer(buf)
	}
}

func (be *Backend) finalizeBuffer(buf backends.Buffer) error {
	if be.IsFinalized() {
		return be.sg.BufferFinalize(buf)
	}
	shape, err := be.sg.BufferShape(buf)
	if err != nil {
		return err
	}
	kept, evicted, err := be.bufs.put(buf, shape)
	if err != nil {
		return fmt.Errorf("BufferFinalize: %w", err)
	}
	if !kept {
		evicted = append(evicted, buf)
	}
	for _, b := range evicted {
		// SimpleGo refuses a buffer it holds already: that error is this release's.
		if err := be.sg.BufferFinalize(b); err != nil && b == buf {
			return err
		}
	}
	return nil
}

func (be *Backend) releaseToSimpleGo(bufs []backends.Buffer) {
	for _, b := range bufs {
		_ = be.sg.BufferFinalize(b)
	}
}

// BufferFinalize implements backends.DataInterface: the buffer goes back to the backend's pool
// (large ones) or SimpleGo's.
func (be *Backend) BufferFinalize(buf backends.Buffer) error { return be.finalizeBuffer(buf) }

// NewSharedBuffer implements backends.DataInterface, with a kept buffer when the pool has one.
func (be *Backend) NewSharedBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, any, error) {
	if deviceNum != 0 || be.IsFinalized() {
		return be.sg.NewSharedBuffer(deviceNum, shape)
	}
	return be.newBuffer(shape)
}

// BufferFromFlatData implements backends.DataInterface, into a kept buffer when the pool has one.
func (be *Backend) BufferFromFlatData(deviceNum backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error) {
	fv := reflect.ValueOf(flat)
	if deviceNum != 0 || be.IsFinalized() || fv.Kind() != reflect.Slice || dtypes.FromGoType(fv.Type().Elem()) != shape.DType || fv.Len() != shape.Size() {
		return be.sg.BufferFromFlatData(deviceNum, flat, shape)
	}
	buf := be.bufs.get(shape)
	if buf == nil {
		return be.sg.BufferFromFlatData(deviceNum, flat, shape)
	}
	dst, err := be.sg.BufferData(buf)
	if err != nil {
		return nil, err
	}
	reflect.Copy(reflect.ValueOf(dst), fv)
	return buf, nil
}

// PoolStats reports what the backend's pool of large buffers has done and holds.
func (be *Backend) PoolStats() PoolStats { return be.bufs.snapshot() }

// isFloat32 reports whether every shape is float32.
func isFloat32(ss ...shapes.Shape) bool {
	for _, s := range ss {
		if s.DType != dtypes.Float32 {
			return false
		}
	}
	return true
}
