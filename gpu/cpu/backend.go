package cpu

import (
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/gobackend"
	"github.com/gomlx/compute/notimplemented"
	"github.com/gomlx/compute/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// BackendName is the name under which the backend registers with GoMLX:
// GOMLX_BACKEND=dclcpu (or dclcpu:threads=N) selects it in compute.New.
const BackendName = "dclcpu"

func init() {
	compute.Register(BackendName, func(config string) (compute.Backend, error) {
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
	// ProfileShapes, with ProfileOps, times each operation by its inputs' shapes as well as
	// its name, to find which layer of a network is slow.
	ProfileShapes bool
	// NoFusion turns off the fusion of element-wise operations (for comparisons and tests).
	NoFusion bool
	// NoRemat turns off rematerialisation (recomputing cheap element-wise values where they
	// are read late instead of keeping them; see remat.go), for comparisons and tests.
	NoRemat bool
	// EmulateTF32 rounds both operands of every float32 convolution and matrix product to
	// TF32 (a 10-bit mantissa, round to nearest even) before multiplying in float32, as TF32
	// tensor cores do: for measuring what TF32 does to a training step and testing the GPU
	// check's tolerances without a GPU. Slower (one rounded copy of each operand), never a
	// training precision of its own.
	EmulateTF32 bool
	// DirectConvolutions computes every convolution with the direct algorithm, never Winograd
	// (kernels.Pool.DirectConvolutions): the GPU check's reference.
	DirectConvolutions bool
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

// Backend implements compute.Backend. Its buffers (type Buffer) hold the pure-Go backend's, so
// values pass between the two without copies.
type Backend struct {
	// goBackend is GoMLX's pure-Go backend ("go"), which runs the operations this one does not
	// implement itself and owns the memory of every buffer.
	goBackend compute.Backend
	pool      *kernels.Pool
	stats     *opStats // nil unless Config.ProfileOps
	// noFusion turns off element-wise fusion (Config.NoFusion).
	noFusion bool
	// noRemat turns off rematerialisation (Config.NoRemat).
	noRemat bool
	// emulateTF32 rounds product operands to TF32 (Config.EmulateTF32).
	emulateTF32 bool
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

var _ compute.Backend = (*Backend)(nil)

// New returns a backend whose kernels run on cfg.Threads goroutines.
func New(cfg Config) (*Backend, error) {
	// One operation at a time in the pure-Go backend: our executor already runs one operation
	// at a time with the cores inside it.
	goBackend, err := gobackend.New("ops_sequential")
	if err != nil {
		return nil, fmt.Errorf("creating GoMLX's pure-Go backend: %w", err)
	}
	threads := cfg.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	be := &Backend{goBackend: goBackend, pool: kernels.NewPool(threads), noFusion: cfg.NoFusion, noRemat: cfg.NoRemat,
		emulateTF32: cfg.EmulateTF32}
	if cfg.ProfileOps {
		be.stats = &opStats{shapes: cfg.ProfileShapes}
	}
	if cfg.DirectConvolutions {
		be.pool.DirectConvolutions()
	}
	return be, nil
}

// Name implements compute.Backend.
func (be *Backend) Name() string { return BackendName }

// String implements compute.Backend.
func (be *Backend) String() string { return BackendName }

// Description implements compute.Backend.
func (be *Backend) Description() string {
	return fmt.Sprintf("dcl-beam CPU backend: packed %s kernels on %d threads, GoMLX's pure-Go backend for the rest", kernels.KernelName(), be.pool.Threads())
}

// Threads is the number of goroutines the kernels use.
func (be *Backend) Threads() int { return be.pool.Threads() }

// NumDevices implements compute.Backend: one CPU device.
func (be *Backend) NumDevices() int { return 1 }

// DeviceDescription implements compute.Backend.
func (be *Backend) DeviceDescription(compute.DeviceNum) string {
	return fmt.Sprintf("cpu (%d threads, %s)", be.pool.Threads(), kernels.KernelName())
}

// nativeOps are the operations this backend implements itself (for float32; other dtypes go
// to the pure-Go backend where it has them).
var nativeOps = []compute.OpType{
	compute.OpTypeConvGeneral, compute.OpTypeDotGeneral,
	compute.OpTypeReverse, compute.OpTypePad,
	compute.OpTypeSelectAndScatterMax, compute.OpTypeSelectAndScatterMin,
	compute.OpTypeBatchNormForInference, compute.OpTypeBatchNormForTraining, compute.OpTypeBatchNormGradient,
}

// Capabilities implements compute.Backend: the pure-Go backend's standard operations, plus
// those added here; main functions only, static shapes, no fused operations (GoMLX builds
// those from standard ones, which keeps this backend's fusion and rematerialisation in charge).
func (be *Backend) Capabilities() compute.Capabilities {
	c := be.goBackend.Capabilities().Clone()
	for op := range c.Operations {
		if isFusedOrDynamic(op) {
			delete(c.Operations, op)
		}
	}
	for _, op := range nativeOps {
		c.Operations[op] = true
	}
	c.Functions = false
	c.DynamicShapes = compute.DynamicShapesNone
	return c
}

// isFusedOrDynamic reports the operations the backend leaves to notimplemented.Function.
func isFusedOrDynamic(op compute.OpType) bool {
	name := op.String()
	return strings.HasPrefix(name, "Fused") || strings.HasPrefix(name, "Dynamic")
}

// Builder implements compute.Backend.
func (be *Backend) Builder(name string) compute.Builder {
	return &Builder{Function: notimplemented.Function{ErrFn: errNotImplemented}, backend: be, name: name}
}

// Finalize implements compute.Backend: it stops the worker pool and the pure-Go backend.
func (be *Backend) Finalize() {
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.finalized {
		return
	}
	be.finalized = true
	be.pool.Close()
	be.releaseToGo(be.bufs.drain())
	be.goBackend.Finalize()
}

// IsFinalized implements compute.Backend.
func (be *Backend) IsFinalized() bool {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.finalized
}

// Buffer implements compute.Buffer for the backend: a buffer of the pure-Go backend that
// answers as this backend's (GoMLX's tensors refuse to pass a buffer between backend instances)
// and whose Finalize returns it to this backend's pool of large buffers.
type Buffer struct {
	be    *Backend
	inner compute.Buffer // the pure-Go backend's buffer, which owns the memory
	shape shapes.Shape
	flat  any // inner's data: a slice of shape's dtype
}

var _ compute.Buffer = (*Buffer)(nil)

// Backend implements compute.Buffer.
func (b *Buffer) Backend() compute.Backend { return b.be }

// Finalize implements compute.Buffer: the buffer goes back to the backend's pool (large ones)
// or the pure-Go backend's.
func (b *Buffer) Finalize() error { return b.be.finalizeBuffer(b) }

// Shape implements compute.Buffer.
func (b *Buffer) Shape() (shapes.Shape, error) { return b.shape, nil }

// DeviceNum implements compute.Buffer: the one CPU device.
func (b *Buffer) DeviceNum() (compute.DeviceNum, error) { return 0, nil }

// ToFlatData implements compute.Buffer.
func (b *Buffer) ToFlatData(flat any) error { return b.inner.ToFlatData(flat) }

// Data implements compute.Buffer: the buffer's own memory, shared with the caller.
func (b *Buffer) Data() (any, error) { return b.flat, nil }

// CopyToDevice implements compute.Buffer: a copy, on the one device there is.
func (b *Buffer) CopyToDevice(deviceNum compute.DeviceNum) (compute.Buffer, error) {
	if err := b.be.usable(deviceNum); err != nil {
		return nil, err
	}
	return b.be.clone(b)
}

// usable says why the backend cannot make buffers on deviceNum: another device than the one
// there is, or a finalized backend.
func (be *Backend) usable(deviceNum compute.DeviceNum) error {
	if deviceNum != 0 {
		return fmt.Errorf("backend %s has only device 0, not %d", BackendName, deviceNum)
	}
	if be.IsFinalized() {
		return fmt.Errorf("backend %s is finalized", BackendName)
	}
	return nil
}

// wrap makes a buffer of the pure-Go backend this backend's.
func (be *Backend) wrap(inner compute.Buffer) (*Buffer, error) {
	shape, err := inner.Shape()
	if err != nil {
		return nil, err
	}
	flat, err := inner.Data()
	if err != nil {
		return nil, err
	}
	return &Buffer{be: be, inner: inner, shape: shape, flat: flat}, nil
}

// own returns buf as a buffer of this backend, or why it is not one.
func (be *Backend) own(buf compute.Buffer) (*Buffer, error) {
	b, ok := buf.(*Buffer)
	if !ok || b == nil {
		return nil, fmt.Errorf("buffer %T is not one of backend %s", buf, BackendName)
	}
	if b.be != be {
		return nil, fmt.Errorf("buffer belongs to another instance of backend %s", BackendName)
	}
	return b, nil
}

// newF32 returns a new float32 buffer of the shape and its data (not zeroed).
func (be *Backend) newF32(shape shapes.Shape) (compute.Buffer, []float32, error) {
	buf, flat, err := be.newBuffer(shape)
	if err != nil {
		return nil, nil, err
	}
	return buf, flat.([]float32), nil
}

// f32 returns a float32 buffer's data.
func (be *Backend) f32(buf compute.Buffer) []float32 {
	return buf.(*Buffer).flat.([]float32)
}

// newBuffer returns a new buffer of any dtype and its flat data slice (not zeroed): a kept one
// of the shape when the pool has one.
func (be *Backend) newBuffer(shape shapes.Shape) (compute.Buffer, any, error) {
	if buf := be.bufs.get(shape); buf != nil {
		flat := buf.(*Buffer).flat
		if be.poisonReused {
			poison(flat)
		}
		return buf, flat, nil
	}
	inner, flat, err := be.goBackend.NewSharedBuffer(0, shape)
	if err != nil {
		return nil, nil, err
	}
	return &Buffer{be: be, inner: inner, shape: shape, flat: flat}, flat, nil
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
func (be *Backend) clone(buf compute.Buffer) (compute.Buffer, error) {
	src, err := be.own(buf)
	if err != nil {
		return nil, err
	}
	out, flat, err := be.newBuffer(src.shape)
	if err != nil {
		return nil, err
	}
	reflect.Copy(reflect.ValueOf(flat), reflect.ValueOf(src.flat))
	return out, nil
}

// release gives a buffer back: large ones to the backend's pool, the others (and those the pool
// has no room for) to the pure-Go backend's.
func (be *Backend) release(buf compute.Buffer) {
	if buf != nil {
		_ = be.finalizeBuffer(buf)
	}
}

func (be *Backend) finalizeBuffer(buf compute.Buffer) error {
	b, err := be.own(buf)
	if err != nil {
		return fmt.Errorf("finalizing a buffer: %w", err)
	}
	if be.IsFinalized() {
		return b.inner.Finalize()
	}
	kept, evicted, err := be.bufs.put(b, b.shape)
	if err != nil {
		return fmt.Errorf("finalizing a buffer: %w", err)
	}
	if !kept {
		evicted = append(evicted, b)
	}
	for _, e := range evicted {
		// The pure-Go backend refuses a buffer it holds already: that error is this release's.
		if err := e.(*Buffer).inner.Finalize(); err != nil && e == buf {
			return err
		}
	}
	return nil
}

// releaseToGo hands buffers back to the pure-Go backend's pools.
func (be *Backend) releaseToGo(bufs []compute.Buffer) {
	for _, b := range bufs {
		_ = b.(*Buffer).inner.Finalize()
	}
}

// HasSharedBuffers implements compute.DataInterface: buffers share memory with the caller.
func (be *Backend) HasSharedBuffers() bool { return true }

// NewSharedBuffer implements compute.DataInterface, with a kept buffer when the pool has one.
func (be *Backend) NewSharedBuffer(deviceNum compute.DeviceNum, shape shapes.Shape) (compute.Buffer, any, error) {
	if err := be.usable(deviceNum); err != nil {
		return nil, nil, err
	}
	return be.newBuffer(shape)
}

// BufferFromFlatData implements compute.DataInterface, into a kept buffer when the pool has one.
func (be *Backend) BufferFromFlatData(deviceNum compute.DeviceNum, flat any, shape shapes.Shape) (compute.Buffer, error) {
	if err := be.usable(deviceNum); err != nil {
		return nil, err
	}
	fv := reflect.ValueOf(flat)
	if fv.Kind() == reflect.Slice && dtypes.FromGoType(fv.Type().Elem()) == shape.DType && fv.Len() == shape.Size() {
		if buf := be.bufs.get(shape); buf != nil {
			reflect.Copy(reflect.ValueOf(buf.(*Buffer).flat), fv)
			return buf, nil
		}
	}
	inner, err := be.goBackend.BufferFromFlatData(deviceNum, flat, shape)
	if err != nil {
		return nil, err
	}
	return be.wrap(inner)
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
