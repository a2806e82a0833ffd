package trainstep

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Checkpoint file format (version 1), little-endian:
//
//	"DCLCKPT1"            8 bytes, magic
//	header length         uint64
//	header                JSON, CheckpointHeader
//	tensor data           each variable's raw values, in header order, at its offset
//	CRC-32C               uint32 of every byte before it
//
// One self-contained file, written atomically (storage.Create), readable from local disk or gs://.
const (
	checkpointMagic   = "DCLCKPT1"
	checkpointVersion = 1
	// CheckpointExt ends every checkpoint file name.
	CheckpointExt = ".dclckpt"
	// CheckpointDir is the folder under a run's output that holds its checkpoints.
	CheckpointDir = "checkpoints"
	// maxHeaderBytes bounds the header a reader will accept (a corrupt length is not allocated).
	maxHeaderBytes = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// CheckpointHeader is the JSON part of a checkpoint: everything but the tensor bytes.
type CheckpointHeader struct {
	FormatVersion int        `json:"format_version"`
	Created       time.Time  `json:"created"`
	Step          StepConfig `json:"step_config"`
	// Run holds the training hyperparameters of the run that wrote it (nil outside Train).
	Run       *RunConfig      `json:"run,omitempty"`
	State     TrainState      `json:"state"`
	Variables []VariableEntry `json:"variables"`
}

// TrainState is where a run stands: enough, with the variables, to continue it exactly.
// The only randomness in a run is the data order, a pure function of (Seed, epoch), and the
// initial weights (InitSeed in the step configuration); so the generator state that a resumed
// run needs is the seed and the position.
type TrainState struct {
	// StepsDone counts optimisation steps taken.
	StepsDone int `json:"steps_done"`
	// Epoch and Batch are the position of the next batch: batch number Batch of epoch Epoch.
	Epoch int `json:"epoch"`
	Batch int `json:"batch"`
	// Seed fixes the data order of every epoch.
	Seed uint64 `json:"seed"`
	// Data and DataFingerprint identify the training data.
	Data            string `json:"data"`
	DataFingerprint string `json:"data_fingerprint"`
	// ImageHeight and ImageWidth are the views' size.
	ImageHeight int `json:"image_height"`
	ImageWidth  int `json:"image_width"`
	// Finished is set on the checkpoint written at the end of the run.
	Finished bool `json:"finished,omitempty"`
}

// VariableEntry describes one stored tensor.
type VariableEntry struct {
	Scope     string `json:"scope"`
	Name      string `json:"name"`
	DType     string `json:"dtype"`
	Dims      []int  `json:"dims"`
	Trainable bool   `json:"trainable"`
	Offset    int64  `json:"offset"` // from the start of the tensor data
	Bytes     int64  `json:"bytes"`
}

// Checkpoint is a checkpoint read into memory.
type Checkpoint struct {
	Path   string
	Header CheckpointHeader
	data   []byte // the tensor data section
}

// SaveCheckpoint writes every variable of s (weights, batch-norm running averages, momentum
// buffers) with the configuration and state to path, atomically.
func SaveCheckpoint(ctx context.Context, path string, s *Step, run *RunConfig, state TrainState) error {
	header := CheckpointHeader{FormatVersion: checkpointVersion, Created: time.Now().UTC(), Step: s.cfg, Run: run, State: state}
	var blobs []*tensors.Tensor
	var offset int64
	for v := range s.store.IterVariables() {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("checkpoint %s: reading variable %s: %w", path, v.Path(), err)
		}
		size := t.Shape().ByteSize()
		header.Variables = append(header.Variables, VariableEntry{
			Scope: v.Scope(), Name: v.Name(), DType: t.DType().String(), Dims: slices.Clone(t.Shape().Dimensions),
			Trainable: v.Trainable, Offset: offset, Bytes: size,
		})
		blobs = append(blobs, t)
		offset += size
	}
	headerJSON, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("checkpoint %s: encoding header: %w", path, err)
	}
	return storage.Create(ctx, path, func(w io.Writer) error {
		crc := crc32.New(crcTable)
		mw := io.MultiWriter(w, crc)
		var prefix [16]byte
		copy(prefix[:8], checkpointMagic)
		binary.LittleEndian.PutUint64(prefix[8:], uint64(len(headerJSON)))
		if _, err := mw.Write(prefix[:]); err != nil {
			return err
		}
		if _, err := mw.Write(headerJSON); err != nil {
			return err
		}
		for i, t := range blobs {
			var werr error
			if err := t.ConstBytes(func(data []byte) { _, werr = mw.Write(data) }); err != nil {
				return fmt.Errorf("variable %s: %w", header.Variables[i].Name, err)
			}
			if werr != nil {
				return werr
			}
		}
		return binary.Write(w, binary.LittleEndian, crc.Sum32())
	})
}

// ReadCheckpoint reads and verifies a checkpoint file: magic, version, checksum, and that every
// variable lies inside the file.
func ReadCheckpoint(ctx context.Context, path string) (*Checkpoint, error) {
	raw, err := storage.ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint %s: %s", path, fmt.Sprintf(format, args...))
	}
	if len(raw) < 20 || string(raw[:8]) != checkpointMagic {
		return nil, bad("not a dcl checkpoint (no %q header)", checkpointMagic)
	}
	body, sum := raw[:len(raw)-4], binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if got := crc32.Checksum(body, crcTable); got != sum {
		return nil, bad("checksum mismatch (file is truncated or corrupt)")
	}
	headerLen := binary.LittleEndian.Uint64(raw[8:16])
	if headerLen > maxHeaderBytes || headerLen > uint64(len(body)-16) {
		return nil, bad("header length %d does not fit in a file of %d bytes", headerLen, len(raw))
	}
	c := &Checkpoint{Path: path, data: body[16+headerLen:]}
	dec := json.NewDecoder(bytes.NewReader(body[16 : 16+headerLen]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c.Header); err != nil {
		return nil, bad("header: %v", err)
	}
	if c.Header.FormatVersion != checkpointVersion {
		return nil, bad("format version %d; this program reads version %d", c.Header.FormatVersion, checkpointVersion)
	}
	for _, v := range c.Header.Variables {
		dt, err := dtypes.DTypeString(v.DType)
		if err != nil {
			return nil, bad("variable %s/%s has unknown dtype %q", v.Scope, v.Name, v.DType)
		}
		// Sizes are checked against the data before any product or sum that could overflow.
		elements := int64(1)
		for _, d := range v.Dims {
			if d < 0 {
				return nil, bad("variable %s/%s has negative dimension in %v", v.Scope, v.Name, v.Dims)
			}
			if d > 0 && elements > int64(len(c.data))/int64(d) {
				return nil, bad("variable %s/%s (%s %v) is larger than the %d bytes of tensor data", v.Scope, v.Name, v.DType, v.Dims, len(c.data))
			}
			elements *= int64(d)
		}
		want := shapes.Make(dt, v.Dims...).ByteSize()
		if v.Bytes != want || v.Offset < 0 || v.Offset > int64(len(c.data)) || v.Bytes > int64(len(c.data))-v.Offset {
			return nil, bad("variable %s/%s (%s %v) at bytes %d+%d does not fit the %d bytes of tensor data",
				v.Scope, v.Name, v.DType, v.Dims, v.Offset, v.Bytes, len(c.data))
		}
	}
	return c, nil
}

// ReadCheckpointHeader reads only the header of a checkpoint (its configuration and state),
// not the tensors; ReadCheckpoint verifies the whole file.
func ReadCheckpointHeader(ctx context.Context, path string) (*CheckpointHeader, error) {
	r, err := storage.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var prefix [16]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil || string(prefix[:8]) != checkpointMagic {
		return nil, fmt.Errorf("checkpoint %s: not a dcl checkpoint (no %q header)", path, checkpointMagic)
	}
	n := binary.LittleEndian.Uint64(prefix[8:])
	if n > maxHeaderBytes {
		return nil, fmt.Errorf("checkpoint %s: header length %d is not plausible", path, n)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("checkpoint %s: reading header: %w", path, err)
	}
	var h CheckpointHeader
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("checkpoint %s: header: %w", path, err)
	}
	if h.FormatVersion != checkpointVersion {
		return nil, fmt.Errorf("checkpoint %s: format version %d; this program reads version %d", path, h.FormatVersion, checkpointVersion)
	}
	return &h, nil
}

// tensor returns the stored value of entry e.
func (c *Checkpoint) tensor(e VariableEntry) (*tensors.Tensor, error) {
	dt, err := dtypes.DTypeString(e.DType)
	if err != nil {
		return nil, err
	}
	t := tensors.FromShape(shapes.Make(dt, e.Dims...))
	err = t.MutableBytes(func(data []byte) { copy(data, c.data[e.Offset:e.Offset+e.Bytes]) })
	return t, err
}

// Restore sets s's variables to the checkpoint's values. The checkpoint must hold a model
// with the same variables (else a one-line error saying what differs); optimiser state it
// holds that s has not created yet is created.
func (c *Checkpoint) Restore(s *Step) error {
	if err := s.model.SameVariables(c.Header.Step.Model); err != nil {
		return fmt.Errorf("checkpoint %s does not fit: %w", c.Path, err)
	}
	return c.restoreInto(s.store, s.cfg.Model.Name, false)
}

// restoreInto sets the variables of store from the checkpoint; with modelOnly it skips the
// optimiser state. Every model variable of store must be in the checkpoint and vice versa.
// Entries are (scope, name) pairs, the scope "/"-separated from the root "/" (GoMLX v0.26's
// context wrote them so; model.Store paths are the same strings joined).
func (c *Checkpoint) restoreInto(store *model.Store, modelName string, modelOnly bool) error {
	stored := make(map[string]bool, len(c.Header.Variables))
	for _, e := range c.Header.Variables {
		if modelOnly && !isModelScope(e.Scope) {
			continue
		}
		stored[variablePath(e.Scope, e.Name)] = true
		t, err := c.tensor(e)
		if err != nil {
			return fmt.Errorf("checkpoint %s: variable %s/%s: %w", c.Path, e.Scope, e.Name, err)
		}
		v := store.GetVariable(variablePath(e.Scope, e.Name))
		if v == nil {
			if isModelScope(e.Scope) {
				return fmt.Errorf("checkpoint %s holds model variable %s/%s that this %s does not have", c.Path, e.Scope, e.Name, modelName)
			}
			created, err := store.CreateVariable(variablePath(e.Scope, e.Name), t)
			if err != nil {
				return fmt.Errorf("checkpoint %s: creating %s/%s: %w", c.Path, e.Scope, e.Name, err)
			}
			created.SetTrainable(e.Trainable)
			continue
		}
		if !v.Shape().Equal(t.Shape()) {
			return fmt.Errorf("checkpoint %s: variable %s/%s is %s, the model's is %s", c.Path, e.Scope, e.Name, t.Shape(), v.Shape())
		}
		if err := v.SetValue(t); err != nil {
			return fmt.Errorf("checkpoint %s: setting %s/%s: %w", c.Path, e.Scope, e.Name, err)
		}
	}
	for v := range store.IterVariables() {
		if isModelScope(v.Scope()) && !stored[v.Path()] {
			return fmt.Errorf("checkpoint %s lacks model variable %s", c.Path, v.Path())
		}
	}
	return nil
}

// variablePath joins a checkpoint entry's scope and name into a model.Store path.
func variablePath(scope, name string) string {
	if scope == model.RootScopePath {
		return scope + name
	}
	return scope + model.ScopeSeparator + name
}

func isModelScope(scope string) bool {
	return scope == model.RootScopePath+modelScope || strings.HasPrefix(scope, model.RootScopePath+modelScope+model.ScopeSeparator)
}

// CheckpointName is the file name of the checkpoint after steps steps.
func CheckpointName(steps int) string { return fmt.Sprintf("step-%09d%s", steps, CheckpointExt) }

// ListCheckpoints returns the checkpoints in a run's output folder (out/checkpoints), oldest
// first, with the step counts their names give.
func ListCheckpoints(ctx context.Context, out string) (paths []string, steps []int, err error) {
	found, err := storage.List(ctx, storage.Join(out, CheckpointDir, "step-*"+CheckpointExt))
	if err != nil {
		return nil, nil, err
	}
	type entry struct {
		path string
		step int
	}
	var entries []entry
	for _, p := range found {
		base := strings.TrimSuffix(strings.TrimPrefix(storage.Base(p), "step-"), CheckpointExt)
		n, err := strconv.Atoi(base)
		if err != nil {
			continue // not one of ours
		}
		entries = append(entries, entry{p, n})
	}
	slices.SortFunc(entries, func(a, b entry) int { return a.step - b.step })
	for _, e := range entries {
		paths, steps = append(paths, e.path), append(steps, e.step)
	}
	return paths, steps, nil
}

// ResolveCheckpoint turns a checkpoint file or a run's output folder (its newest checkpoint)
// into a checkpoint path.
func ResolveCheckpoint(ctx context.Context, path string) (string, error) {
	if strings.HasSuffix(path, CheckpointExt) {
		return path, nil
	}
	paths, _, err := ListCheckpoints(ctx, path)
	if err != nil {
		return "", err
	}
	if len(paths) == 0 {
		return "", fmt.Errorf("no checkpoint in %s (looked for %s)", path, storage.Join(path, CheckpointDir, "step-*"+CheckpointExt))
	}
	return paths[len(paths)-1], nil
}
