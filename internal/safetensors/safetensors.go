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
	"io"
	"math"
	"slices"
	"strings"
)

// DTypes as the format spells them.
const (
	BOOL = "BOOL"
	U8   = "U8"
	I8   = "I8"
	I16  = "I16"
	U16  = "U16"
	F16  = "F16"
	BF16 = "BF16"
	I32  = "I32"
	U32  = "U32"
	F32  = "F32"
	F64  = "F64"
	I64  = "I64"
	U64  = "U64"
)

var dtypeSize = map[string]int{BOOL: 1, U8: 1, I8: 1, I16: 2, U16: 2, F16: 2, BF16: 2, I32: 4, U32: 4, F32: 4, F64: 8, I64: 8, U64: 8}

// MaxHeaderBytes bounds the JSON header a reader accepts (the reference implementation's
// limit), so that a corrupt length is never allocated.
const MaxHeaderBytes = 100 << 20

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

// Info is a tensor's description, without its data.
type Info struct {
	Name  string
	DType string
	Shape []int
}

// Bytes is the size of the tensor's data, or -1 for an unknown dtype or a negative dimension.
func (i Info) Bytes() int64 {
	size, ok := dtypeSize[i.DType]
	if !ok {
		return -1
	}
	n := int64(size)
	for _, d := range i.Shape {
		if d < 0 || d > 0 && n > math.MaxInt64/int64(d) {
			return -1
		}
		n *= int64(d)
	}
	return n
}

func (i Info) check() error {
	if _, ok := dtypeSize[i.DType]; !ok {
		return fmt.Errorf("tensor %s: unknown dtype %q", i.Name, i.DType)
	}
	if i.Bytes() < 0 {
		return fmt.Errorf("tensor %s: shape %v has a negative or too large dimension", i.Name, i.Shape)
	}
	return nil
}

func (t Tensor) info() Info { return Info{Name: t.Name, DType: t.DType, Shape: t.Shape} }

func (t Tensor) check() error {
	if err := t.info().check(); err != nil {
		return err
	}
	if want := t.info().Bytes(); int64(len(t.Data)) != want {
		return fmt.Errorf("tensor %s: %d bytes for shape %v of %s, want %d", t.Name, len(t.Data), t.Shape, t.DType, want)
	}
	return nil
}

// Header returns the start of a file holding tensors described by infos and metadata: the
// header's length, the JSON header and its padding. The tensors' data must follow it, in the
// order of order (infos sorted by name, which must be unique and not MetadataKey), with no
// gaps: Encode does that for tensors in memory; a writer of large tensors writes them itself.
func Header(infos []Info, metadata map[string]string) (prefix []byte, order []Info, err error) {
	order = slices.Clone(infos)
	slices.SortFunc(order, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	header := make(map[string]any, len(order)+1)
	if len(metadata) > 0 {
		header[MetadataKey] = metadata
	}
	var offset int64
	for i, t := range order {
		if t.Name == "" || t.Name == MetadataKey {
			return nil, nil, fmt.Errorf("tensor name %q is reserved", t.Name)
		}
		if i > 0 && order[i-1].Name == t.Name {
			return nil, nil, fmt.Errorf("tensor %s appears twice", t.Name)
		}
		if err := t.check(); err != nil {
			return nil, nil, err
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = entry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{offset, offset + t.Bytes()}}
		offset += t.Bytes()
	}
	h, err := json.Marshal(header) // map keys come out sorted
	if err != nil {
		return nil, nil, err
	}
	// Padding keeps the data 8-byte aligned, so a reader can map it and view it in place.
	if pad := (8 - len(h)%8) % 8; pad > 0 {
		h = append(h, bytes.Repeat([]byte(" "), pad)...)
	}
	prefix = make([]byte, 8, 8+len(h))
	binary.LittleEndian.PutUint64(prefix, uint64(len(h)))
	return append(prefix, h...), order, nil
}

// Encode returns the file holding tensors (in the order of their names, which must be unique
// and not MetadataKey) and metadata.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	infos := make([]Info, len(tensors))
	byName := make(map[string]Tensor, len(tensors))
	for i, t := range tensors {
		if err := t.check(); err != nil {
			return nil, err
		}
		infos[i] = t.info()
		byName[t.Name] = t
	}
	prefix, order, err := Header(infos, metadata)
	if err != nil {
		return nil, err
	}
	out := prefix
	for _, i := range order {
		out = append(out, byName[i.Name].Data...)
	}
	return out, nil
}

// ReadHeader reads the header at the start of r: the tensors' descriptions in the order of
// their data, their offsets from the start of the data, the metadata, and where the data
// starts in the file. It checks what the header alone can show (dtypes, shapes against byte
// ranges, contiguous data); the data's length is the caller's to check.
func ReadHeader(r io.Reader) (infos []Info, offsets []int64, metadata map[string]string, dataStart int64, err error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("reading the header length: %w", err)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > MaxHeaderBytes {
		return nil, nil, nil, 0, fmt.Errorf("header length %d is over the %d bytes a header may have", size, MaxHeaderBytes)
	}
	h := make([]byte, size)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("reading a header of %d bytes: %w", size, err)
	}
	entries, metadata, err := parseHeader(h)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	for _, e := range entries {
		infos = append(infos, e.info)
		offsets = append(offsets, e.begin)
	}
	return infos, offsets, metadata, 8 + int64(size), nil
}

type located struct {
	info       Info
	begin, end int64
}

// parseHeader decodes a JSON header and checks each entry and that the entries' data is
// contiguous from 0; entries come back in data order.
func parseHeader(h []byte) ([]located, map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(h, &raw); err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	var metadata map[string]string
	var out []located
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
		info := Info{Name: name, DType: e.DType, Shape: e.Shape}
		if err := info.check(); err != nil {
			return nil, nil, err
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end-begin != info.Bytes() {
			return nil, nil, fmt.Errorf("tensor %s: data offsets [%d, %d] for %d bytes of %s %v", name, begin, end, info.Bytes(), info.DType, info.Shape)
		}
		out = append(out, located{info, begin, end})
	}
	slices.SortFunc(out, func(a, b located) int {
		if a.begin != b.begin {
			if a.begin < b.begin {
				return -1
			}
			return 1
		}
		return strings.Compare(a.info.Name, b.info.Name)
	})
	var at int64
	for _, e := range out {
		if e.begin != at {
			return nil, nil, fmt.Errorf("tensor %s starts at byte %d of the data, want %d: the data must be contiguous", e.info.Name, e.begin, at)
		}
		at = e.end
	}
	return out, metadata, nil
}

// Decode parses a safetensors file, checking what the specification requires: a header that
// fits, known dtypes, byte ranges that match the shapes and cover the data contiguously.
// Tensors come back in the order of their data; their Data are slices of data.
func Decode(data []byte) (tensors []Tensor, metadata map[string]string, err error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("%d bytes: shorter than the header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, nil, fmt.Errorf("header length %d runs past the end of %d bytes", n, len(data))
	}
	entries, metadata, err := parseHeader(data[8 : 8+n])
	if err != nil {
		return nil, nil, err
	}
	body := data[8+n:]
	var at int64
	for _, e := range entries {
		if e.end > int64(len(body)) {
			return nil, nil, fmt.Errorf("tensor %s: data offsets [%d, %d] outside the %d data bytes", e.info.Name, e.begin, e.end, len(body))
		}
		tensors = append(tensors, Tensor{Name: e.info.Name, DType: e.info.DType, Shape: e.info.Shape, Data: body[e.begin:e.end]})
		at = e.end
	}
	if at != int64(len(body)) {
		return nil, nil, fmt.Errorf("tensors cover %d of %d data bytes", at, len(body))
	}
	return tensors, metadata, nil
}
