package trainstep

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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

	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/safetensors"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// A checkpoint is a safetensors file (https://github.com/huggingface/safetensors), so any
// safetensors reader opens it: one tensor per variable (weights, batch-norm running averages,
// optimiser and method state), named by its path in the model store without the leading
// "/" (model/backbone/stem/conv/weights), in this package's layouts (convolution kernels
// HWIO; `dcl export` writes PyTorch's). Its metadata holds
//
//	dcl.format    "dcl-checkpoint"
//	dcl.header    the CheckpointHeader as JSON: model, loss, optimiser and run settings,
//	              where the run stands, and every variable's scope, name, dtype and shape
//	dcl.sha256    hex SHA-256 of dcl.header's bytes followed by the file's data section
//	              (everything after the header), so a truncated or corrupt file is refused
//
// One self-contained file, written atomically (storage.Create), readable from local disk or
// gs://. Checkpoints of the first format (DCLCKPT1: a magic, a JSON header, the raw values
// and a CRC-32C, named *.dclckpt) are still read, resumed from and exported.
const (
	checkpointVersion = 2
	// CheckpointExt ends every checkpoint file name.
	CheckpointExt = ".safetensors"
	// CheckpointDir is the folder under a run's output that holds its checkpoints.
	CheckpointDir = "checkpoints"

	checkpointFormat = "dcl-checkpoint"
	metaFormat       = "dcl.format"
	metaHeader       = "dcl.header"
	metaSHA256       = "dcl.sha256"
)

// The first format: "DCLCKPT1", the header's length (uint64), the header (JSON, with each
// variable's offset and size in the data), the values, a CRC-32C of every byte before it.
const (
	legacyMagic   = "DCLCKPT1"
	legacyVersion = 1
	// LegacyCheckpointExt ends the names of checkpoints of the first format.
	LegacyCheckpointExt = ".dclckpt"
	// maxHeaderBytes bounds the header a reader will accept (a corrupt length is not allocated).
	maxHeaderBytes = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// CheckpointHeader is the configuration and state of a checkpoint: everything but the tensors.
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

// VariableEntry describes one stored variable.
type VariableEntry struct {
	Scope     string `json:"scope"`
	Name      string `json:"name"`
	DType     string `json:"dtype"`
	Dims      []int  `json:"dims"`
	Trainable bool   `json:"trainable"`
	// Offset and Bytes place the values in the data of a first-format file; a safetensors
	// checkpoint's header places them.
	Offset int64 `json:"offset,omitempty"`
	Bytes  int64 `json:"bytes,omitempty"`
}

// tensorName is the entry's tensor in a safetensors checkpoint.
func (e VariableEntry) tensorName() string {
	return strings.TrimPrefix(variablePath(e.Scope, e.Name), model.RootScopePath)
}

// Checkpoint is a checkpoint read into memory and verified.
type Checkpoint struct {
	Path   string
	Header CheckpointHeader
	values map[string][]byte // by variablePath: each variable's raw little-endian values
}

// raw returns the stored bytes of entry e.
func (c *Checkpoint) raw(e VariableEntry) []byte { return c.values[variablePath(e.Scope, e.Name)] }

// safetensorsDTypes maps the dtypes of variables to the format's names.
var safetensorsDTypes = map[dtypes.DType]string{
	dtypes.Bool: safetensors.BOOL, dtypes.Uint8: safetensors.U8, dtypes.Int8: safetensors.I8,
	dtypes.Int16: safetensors.I16, dtypes.Uint16: safetensors.U16, dtypes.Float16: safetensors.F16,
	dtypes.BFloat16: safetensors.BF16, dtypes.Int32: safetensors.I32, dtypes.Uint32: safetensors.U32,
	dtypes.Float32: safetensors.F32, dtypes.Float64: safetensors.F64, dtypes.Int64: safetensors.I64,
	dtypes.Uint64: safetensors.U64,
}

// SaveCheckpoint writes every variable of s (weights, batch-norm running averages, optimiser
// and method state) with the configuration and state to path, atomically.
func SaveCheckpoint(ctx context.Context, path string, s *Step, run *RunConfig, state TrainState) error {
	header := CheckpointHeader{FormatVersion: checkpointVersion, Created: time.Now().UTC(), Step: s.cfg, Run: run, State: state}
	values := map[string]*tensors.Tensor{}
	var infos []safetensors.Info
	for v := range s.store.IterVariables() {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("checkpoint %s: reading variable %s: %w", path, v.Path(), err)
		}
		e := VariableEntry{Scope: v.Scope(), Name: v.Name(), DType: t.DType().String(), Dims: slices.Clone(t.Shape().Dimensions), Trainable: v.Trainable}
		st, ok := safetensorsDTypes[t.DType()]
		if !ok {
			return fmt.Errorf("checkpoint %s: variable %s is %s, which safetensors cannot hold", path, v.Path(), t.DType())
		}
		header.Variables = append(header.Variables, e)
		infos = append(infos, safetensors.Info{Name: e.tensorName(), DType: st, Shape: e.Dims})
		values[e.tensorName()] = t
	}
	headerJSON, err := json.Marshal(rawname.Valid(header)) // the data's path as given, as text
	if err != nil {
		return fmt.Errorf("checkpoint %s: encoding header: %w", path, err)
	}
	// The checksum goes in the header, before the data: a first pass over the values sums them.
	sum := sha256.New()
	sum.Write(headerJSON)
	_, order, err := safetensors.Header(infos, nil)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	writeValues := func(w io.Writer) error {
		for _, info := range order {
			var werr error
			if err := values[info.Name].ConstBytes(func(data []byte) { _, werr = w.Write(data) }); err != nil {
				return fmt.Errorf("variable %s: %w", info.Name, err)
			}
			if werr != nil {
				return werr
			}
		}
		return nil
	}
	if err := writeValues(sum); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	prefix, _, err := safetensors.Header(infos, map[string]string{
		metaFormat: checkpointFormat, metaHeader: string(headerJSON), metaSHA256: hex.EncodeToString(sum.Sum(nil)),
	})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return storage.Create(ctx, path, func(w io.Writer) error {
		if _, err := w.Write(prefix); err != nil {
			return err
		}
		return writeValues(w)
	})
}

// ReadCheckpoint reads and verifies a checkpoint file (either format): its checksum, its
// header, and that every variable the header lists is stored with its dtype and shape.
func ReadCheckpoint(ctx context.Context, path string) (*Checkpoint, error) {
	raw, err := storage.ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	if len(raw) >= len(legacyMagic) && string(raw[:len(legacyMagic)]) == legacyMagic {
		return readLegacyCheckpoint(path, raw)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint %s: %s", path, fmt.Sprintf(format, args...))
	}
	stored, meta, err := safetensors.Decode(raw)
	if err != nil {
		return nil, bad("not a dcl checkpoint, or a truncated or corrupt one: %v", err)
	}
	h, err := checkpointHeader(meta)
	if err != nil {
		return nil, bad("%v", err)
	}
	dataStart := int64(8 + binary.LittleEndian.Uint64(raw))
	sum := sha256.New()
	sum.Write([]byte(meta[metaHeader]))
	sum.Write(raw[dataStart:])
	if got := hex.EncodeToString(sum.Sum(nil)); got != meta[metaSHA256] {
		return nil, bad("checksum mismatch (file is truncated or corrupt)")
	}
	byName := make(map[string]safetensors.Tensor, len(stored))
	for _, t := range stored {
		byName[t.Name] = t
	}
	c := &Checkpoint{Path: path, Header: *h, values: make(map[string][]byte, len(stored))}
	for _, v := range h.Variables {
		t, ok := byName[v.tensorName()]
		if !ok {
			return nil, bad("variable %s/%s has no tensor %s", v.Scope, v.Name, v.tensorName())
		}
		delete(byName, v.tensorName())
		dt, err := dtypes.DTypeString(v.DType)
		if err != nil || safetensorsDTypes[dt] != t.DType || !slices.Equal(v.Dims, t.Shape) {
			return nil, bad("variable %s/%s is %s %v in the header, its tensor %s %v", v.Scope, v.Name, v.DType, v.Dims, t.DType, t.Shape)
		}
		c.values[variablePath(v.Scope, v.Name)] = t.Data
	}
	for name := range byName {
		return nil, bad("tensor %s is not a variable of the header", name)
	}
	if err := c.checkFinite(); err != nil {
		return nil, bad("%v", err)
	}
	return c, nil
}

// checkFinite refuses a checkpoint with a NaN or an infinity in a floating-point variable: no
// step of a run that trains writes one, and a model holding one embeds and exports nothing
// but NaNs.
func (c *Checkpoint) checkFinite() error {
	for _, v := range c.Header.Variables {
		data := c.raw(v)
		var bad int
		switch v.DType {
		case dtypes.Float32.String():
			bad = firstNonFinite(data, 4, func(b []byte) bool {
				return binary.LittleEndian.Uint32(b)&0x7f800000 == 0x7f800000
			})
		case dtypes.Float64.String():
			bad = firstNonFinite(data, 8, func(b []byte) bool {
				return binary.LittleEndian.Uint64(b)&0x7ff0000000000000 == 0x7ff0000000000000
			})
		case dtypes.Float16.String():
			bad = firstNonFinite(data, 2, func(b []byte) bool { return binary.LittleEndian.Uint16(b)&0x7c00 == 0x7c00 })
		case dtypes.BFloat16.String():
			bad = firstNonFinite(data, 2, func(b []byte) bool { return binary.LittleEndian.Uint16(b)&0x7f80 == 0x7f80 })
		default:
			continue
		}
		if bad >= 0 {
			return fmt.Errorf("variable %s/%s holds a NaN or an infinity (element %d): the run that wrote it diverged, or the file was altered", v.Scope, v.Name, bad)
		}
	}
	return nil
}

// firstNonFinite returns the index of the first element of size bytes in data for which
// nonFinite holds, or -1.
func firstNonFinite(data []byte, size int, nonFinite func([]byte) bool) int {
	for i := 0; i+size <= len(data); i += size {
		if nonFinite(data[i : i+size]) {
			return i / size
		}
	}
	return -1
}

// checkpointHeader decodes and checks the header a safetensors checkpoint's metadata holds.
func checkpointHeader(meta map[string]string) (*CheckpointHeader, error) {
	if meta[metaFormat] != checkpointFormat {
		return nil, fmt.Errorf("not a dcl checkpoint (metadata %s is %q, want %q)", metaFormat, meta[metaFormat], checkpointFormat)
	}
	var h CheckpointHeader
	if err := storage.DecodeJSON([]byte(meta[metaHeader]), &h); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	if h.FormatVersion != checkpointVersion {
		return nil, fmt.Errorf("format version %d; this program reads versions %d and %d", h.FormatVersion, legacyVersion, checkpointVersion)
	}
	if err := h.check(); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	return &h, nil
}

// check refuses a header whose state no run can have reached, whatever its data: a
// checksum proves a file whole, not that what it says is possible (a header can be edited
// and its checksum computed again). Where the run's data is known, checkPosition checks
// the position against it too.
func (h *CheckpointHeader) check() error {
	st := h.State
	switch {
	case st.StepsDone < 0 || st.Epoch < 0 || st.Batch < 0:
		return fmt.Errorf("state: steps done %d, epoch %d, batch %d: none may be negative", st.StepsDone, st.Epoch, st.Batch)
	case st.Batch > st.StepsDone:
		return fmt.Errorf("state: at batch %d after %d steps: each batch is a step", st.Batch, st.StepsDone)
	case st.ImageHeight < 0 || st.ImageWidth < 0:
		return fmt.Errorf("state: images of %dx%d", st.ImageHeight, st.ImageWidth)
	}
	if r := h.Run; r != nil {
		switch {
		case r.BatchSize <= 0 || r.Epochs < 0:
			return fmt.Errorf("run: batch size %d, %d epochs", r.BatchSize, r.Epochs)
		case st.Epoch > r.Epochs || st.Epoch == r.Epochs && st.Batch > 0:
			return fmt.Errorf("state: at epoch %d batch %d of a run of %d epochs", st.Epoch, st.Batch, r.Epochs)
		case st.Finished && st.Epoch != r.Epochs:
			return fmt.Errorf("state: finished at epoch %d of a run of %d epochs", st.Epoch, r.Epochs)
		}
		// Every step is one batch and every epoch the same number of them: the steps are
		// Epoch whole epochs and Batch more.
		if st.Epoch == 0 && st.StepsDone != st.Batch ||
			st.Epoch > 0 && ((st.StepsDone-st.Batch)%st.Epoch != 0 || (st.StepsDone-st.Batch)/st.Epoch <= st.Batch) {
			return fmt.Errorf("state: at epoch %d batch %d after %d steps, which no number of steps an epoch gives", st.Epoch, st.Batch, st.StepsDone)
		}
	}
	for _, v := range h.Variables {
		for _, d := range v.Dims {
			if d < 0 {
				return fmt.Errorf("variable %s/%s has a negative dimension in %v", v.Scope, v.Name, v.Dims)
			}
		}
	}
	return nil
}

// checkPosition refuses a run's checkpoint whose position does not follow from its steps on
// data of stepsPerEpoch batches an epoch: every step is one batch, and an epoch ends after
// stepsPerEpoch of them.
func checkPosition(path string, st TrainState, stepsPerEpoch int) error {
	if stepsPerEpoch <= 0 {
		return nil
	}
	if st.Batch >= stepsPerEpoch || st.StepsDone != st.Epoch*stepsPerEpoch+st.Batch {
		return fmt.Errorf("checkpoint %s is at epoch %d batch %d after %d steps, which no run on this data (%d steps an epoch) reaches: it is not this run's, or it was altered",
			path, st.Epoch, st.Batch, st.StepsDone, stepsPerEpoch)
	}
	return nil
}

// readLegacyCheckpoint reads a checkpoint of the first format: magic, checksum, version, and
// that every variable lies inside the file.
func readLegacyCheckpoint(path string, raw []byte) (*Checkpoint, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint %s: %s", path, fmt.Sprintf(format, args...))
	}
	if len(raw) < 20 {
		return nil, bad("truncated (%d bytes)", len(raw))
	}
	body, sum := raw[:len(raw)-4], binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if got := crc32.Checksum(body, crcTable); got != sum {
		return nil, bad("checksum mismatch (file is truncated or corrupt)")
	}
	headerLen := binary.LittleEndian.Uint64(raw[8:16])
	if headerLen > maxHeaderBytes || headerLen > uint64(len(body)-16) {
		return nil, bad("header length %d does not fit in a file of %d bytes", headerLen, len(raw))
	}
	data := body[16+headerLen:]
	c := &Checkpoint{Path: path, values: map[string][]byte{}}
	if err := storage.DecodeJSON(body[16:16+headerLen], &c.Header); err != nil {
		return nil, bad("header: %v", err)
	}
	if c.Header.FormatVersion != legacyVersion {
		return nil, bad("format version %d in a %s file, which holds version %d", c.Header.FormatVersion, legacyMagic, legacyVersion)
	}
	if err := c.Header.check(); err != nil {
		return nil, bad("header: %v", err)
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
			if d > 0 && elements > int64(len(data))/int64(d) {
				return nil, bad("variable %s/%s (%s %v) is larger than the %d bytes of tensor data", v.Scope, v.Name, v.DType, v.Dims, len(data))
			}
			elements *= int64(d)
		}
		want := shapes.Make(dt, v.Dims...).ByteSize()
		if v.Bytes != want || v.Offset < 0 || v.Offset > int64(len(data)) || v.Bytes > int64(len(data))-v.Offset {
			return nil, bad("variable %s/%s (%s %v) at bytes %d+%d does not fit the %d bytes of tensor data",
				v.Scope, v.Name, v.DType, v.Dims, v.Offset, v.Bytes, len(data))
		}
		c.values[variablePath(v.Scope, v.Name)] = data[v.Offset : v.Offset+v.Bytes]
	}
	if err := c.checkFinite(); err != nil {
		return nil, bad("%v", err)
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
	br := bufio.NewReader(r)
	start, err := br.Peek(len(legacyMagic))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: not a dcl checkpoint (%d bytes)", path, len(start))
	}
	if string(start) == legacyMagic {
		return readLegacyHeader(path, br)
	}
	_, _, meta, _, err := safetensors.ReadHeader(br)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: not a dcl checkpoint, or a truncated or corrupt one: %w", path, err)
	}
	h, err := checkpointHeader(meta)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return h, nil
}

func readLegacyHeader(path string, r io.Reader) (*CheckpointHeader, error) {
	var prefix [16]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, fmt.Errorf("checkpoint %s: truncated", path)
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
	if err := storage.DecodeJSON(raw, &h); err != nil {
		return nil, fmt.Errorf("checkpoint %s: header: %w", path, err)
	}
	if h.FormatVersion != legacyVersion {
		return nil, fmt.Errorf("checkpoint %s: format version %d in a %s file, which holds version %d", path, h.FormatVersion, legacyMagic, legacyVersion)
	}
	if err := h.check(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: header: %w", path, err)
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
	raw := c.raw(e)
	if int64(len(raw)) != t.Shape().ByteSize() {
		return nil, fmt.Errorf("%d bytes stored for %s %v", len(raw), e.DType, e.Dims)
	}
	err = t.MutableBytes(func(data []byte) { copy(data, raw) })
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

// isCheckpointName reports whether a path ends like a checkpoint of either format.
func isCheckpointName(p string) bool {
	return strings.HasSuffix(p, CheckpointExt) || strings.HasSuffix(p, LegacyCheckpointExt)
}

// ListCheckpoints returns the checkpoints in a run's output folder (out/checkpoints), oldest
// first, with the step counts their names give; checkpoints of the first format count too
// (a run started by an earlier version resumes from them), before one of the same step in
// the current format, which counts as the newer.
func ListCheckpoints(ctx context.Context, out string) (paths []string, steps []int, err error) {
	found, err := storage.List(ctx, storage.Join(out, CheckpointDir, "step-*"))
	if err != nil {
		return nil, nil, err
	}
	type entry struct {
		path   string
		step   int
		legacy bool
	}
	var entries []entry
	for _, p := range found {
		base := storage.Base(p)
		legacy := strings.HasSuffix(base, LegacyCheckpointExt)
		if !legacy && !strings.HasSuffix(base, CheckpointExt) {
			continue
		}
		digits := strings.TrimPrefix(strings.TrimSuffix(strings.TrimSuffix(base, CheckpointExt), LegacyCheckpointExt), "step-")
		n, err := strconv.Atoi(digits)
		if err != nil {
			continue // not one of ours
		}
		entries = append(entries, entry{p, n, legacy})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.step != b.step {
			return a.step - b.step
		}
		switch {
		case a.legacy == b.legacy:
			return 0
		case a.legacy:
			return -1
		}
		return 1
	})
	for _, e := range entries {
		paths, steps = append(paths, e.path), append(steps, e.step)
	}
	return paths, steps, nil
}

// ResolveCheckpoint turns a checkpoint file or a run's output folder (its newest checkpoint)
// into a checkpoint path.
func ResolveCheckpoint(ctx context.Context, path string) (string, error) {
	if isCheckpointName(path) {
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
