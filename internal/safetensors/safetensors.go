// Package safetensors writes and reads the safetensors format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header mapping each tensor's name to its dtype, shape and byte range, an optional
// "__metadata__" object of strings, padding with spaces to a multiple of 8 bytes, then the
// tensors' raw little-endian bytes, contiguous, in the order of their names.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// DTypes this package writes, as the format spells them.
const (
	F32 = "F32"
	I64 = "I64"
)

var dtypeSize = map[string]int{F32: 4, I64: 8}

// Tensor is one named tensor with its raw little-endian bytes.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// Float32 makes a F32 tensor of values (row-major, len = product of shape).
func Float32(name string, shape []int, values []float32) Tensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, DType: F32, Shape: slices.Clone(shape), Data: data}
}

// Int64Scalar makes a 0-dimensional I64 tensor (PyTorch's num_batches_tracked).
func Int64Scalar(name string, v int64) Tensor {
	return Tensor{Name: name, DType: I64, Shape: []int{}, Data: binary.LittleEndian.AppendUint64(nil, uint64(v))}
}

// Float32s returns the values of a F32 tensor.
func (t Tensor) Float32s() ([]float32, error) {
	if t.DType != F32 {
		return nil, fmt.Errorf("tensor %s is %s, not %s", t.Name, t.DType, F32)
	}
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// MetadataKey is the header's entry of free-form string metadata.
const MetadataKey = "__metadata__"

type entry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

func (t Tensor) check() error {
	size, ok := dtypeSize[t.DType]
	if !ok {
		return fmt.Errorf("tensor %s: dtype %q: want %s or %s", t.Name, t.DType, F32, I64)
	}
	n := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %s: negative dimension in shape %v", t.Name, t.Shape)
		}
		n *= d
	}
	if len(t.Data) != n*size {
		return fmt.Errorf("tensor %s: %d bytes for shape %v of %s, want %d", t.Name, len(t.Data), t.Shape, t.DType, n*size)
	}
	return nil
}

// Encode returns the file holding tensors (in the order of their names, which must be unique
// and not MetadataKey) and metadata.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	header := make(map[string]any, len(sorted)+1)
	if len(metadata) > 0 {
		header[MetadataKey] = metadata
	}
	var offset int64
	for i, t := range sorted {
		if t.Name == "" || t.Name == MetadataKey {
			return nil, fmt.Errorf("tensor name %q is reserved", t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return nil, fmt.Errorf("tensor %s appears twice", t.Name)
		}
		if err := t.check(); err != nil {
			return nil, err
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = entry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{offset, offset + int64(len(t.Data))}}
		offset += int64(len(t.Data))
	}
	h, err := json.Marshal(header) // map keys come out sorted
	if err != nil {
		return nil, err
	}
	// Padding keeps the data 8-byte aligned, so a reader can map it and view it in place.
	if pad := (8 - len(h)%8) % 8; pad > 0 {
		h = append(h, bytes.Repeat([]byte(" "), pad)...)
	}
	out := make([]byte, 8, 8+len(h)+int(offset))
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	for _, t := range sorted {
		out = append(out, t.Data...)
	}
	return out, nil
}

// Decode parses a safetensors file, checking what the specification requires: a header that
// fits, known dtypes, byte ranges that match the shapes and cover the data contiguously.
// Tensors come back in the order of their data.
func Decode(data []byte) (tensors []Tensor, metadata map[string]string, err error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("%d bytes: shorter than the header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, nil, fmt.Errorf("header length %d runs past the end of %d bytes", n, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	body := data[8+n:]
	begins := map[string]int64{}
	for name, msg := range raw {
		if name == MetadataKey {
			if err := json.Unmarshal(msg, &metadata); err != nil {
				return nil, nil, fmt.Errorf("header %s: %w", MetadataKey, err)
			}
			continue
		}
		var e entry
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, nil, fmt.Errorf("header entry %s: %w", name, err)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(body)) {
			return nil, nil, fmt.Errorf("tensor %s: data offsets [%d, %d] outside the %d data bytes", name, begin, end, len(body))
		}
		t := Tensor{Name: name, DType: e.DType, Shape: e.Shape, Data: body[begin:end]}
		if err := t.check(); err != nil {
			return nil, nil, err
		}
		tensors = append(tensors, t)
		begins[name] = begin
	}
	offsetOf := func(t Tensor) int64 { return begins[t.Name] }
	slices.SortFunc(tensors, func(a, b Tensor) int { return int(offsetOf(a) - offsetOf(b)) })
	var at int64
	for _, t := range tensors {
		if offsetOf(t) != at {
			return nil, nil, fmt.Errorf("tensor %s starts at byte %d of the data, want %d: the data must be contiguous", t.Name, offsetOf(t), at)
		}
		at += int64(len(t.Data))
	}
	if at != int64(len(body)) {
		return nil, nil, fmt.Errorf("tensors cover %d of %d data bytes", at, len(body))
	}
	return tensors, metadata, nil
}
