package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestEncodeLayout checks a small file byte by byte against the specification: header length,
// JSON header with sorted names and contiguous offsets, space padding to 8 bytes, raw data.
func TestEncodeLayout(t *testing.T) {
	data, err := Encode([]Tensor{
		Float32("b", []int{2}, []float32{1, -2}),
		Int64Scalar("a", 7),
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	header := string(data[8 : 8+n])
	want := `{"__metadata__":{"format":"pt"},"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`
	if strings.TrimRight(header, " ") != want {
		t.Errorf("header %q\nwant      %q", header, want)
	}
	if (8+n)%8 != 0 || len(header)-len(strings.TrimRight(header, " ")) >= 8 {
		t.Errorf("header of %d bytes: the data must start 8-byte aligned with under 8 spaces of padding", n)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(header), &v); err != nil {
		t.Errorf("padded header is not JSON: %v", err)
	}
	body := data[8+n:]
	if len(body) != 16 || binary.LittleEndian.Uint64(body) != 7 ||
		binary.LittleEndian.Uint32(body[8:]) != 0x3f800000 || binary.LittleEndian.Uint32(body[12:]) != 0xc0000000 {
		t.Errorf("data % x", body)
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		give []Tensor
		want string
	}{
		{[]Tensor{Float32("x", []int{3}, []float32{1, 2})}, "tensor x: 8 bytes for shape [3]"},
		{[]Tensor{Float32("x", []int{1}, []float32{1}), Float32("x", []int{1}, []float32{1})}, "tensor x appears twice"},
		{[]Tensor{Float32(MetadataKey, []int{1}, []float32{1})}, "reserved"},
		{[]Tensor{{Name: "x", DType: "F8_E9", Shape: []int{1}, Data: []byte{0}}}, `dtype "F8_E9"`},
	}
	for _, tt := range tests {
		if _, err := Encode(tt.give, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Encode(%v): error %v, want one with %q", tt.give[0].Name, err, tt.want)
		}
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	data, err := Encode([]Tensor{Float32("w", []int{2, 1}, []float32{0.5, 3}), Int64Scalar("n", 4)}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	ts, meta, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "n" || ts[1].Name != "w" || meta["k"] != "v" {
		t.Fatalf("decoded %+v, %v", ts, meta)
	}
	if vals, err := ts[1].Float32s(); err != nil || vals[0] != 0.5 || vals[1] != 3 {
		t.Errorf("w = %v, %v", vals, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	file := func(header string, body int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(b, header...), make([]byte, body)...)
	}
	tests := []struct {
		name string
		give []byte
		want string
	}{
		{"short", []byte{1, 2}, "shorter than the header length"},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 100), "runs past the end"},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "contiguous"},
		{"size", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "for 8 bytes"},
		{"tail", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "cover 4 of 8"},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[1],"offsets":[0,4]}}`, 4), "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Decode(tt.give); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

// TestReadHeader reads only the header of a file: the tensors in data order with their
// offsets, the metadata, and where the data starts; a corrupt length is refused before
// anything of that size is allocated.
func TestReadHeader(t *testing.T) {
	bf := Tensor{Name: "h", DType: BF16, Shape: []int{3}, Data: []byte{1, 2, 3, 4, 5, 6}}
	data, err := Encode([]Tensor{Float32("w", []int{2, 1}, []float32{0.5, 3}), bf, Int64Scalar("n", 4)}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	infos, offsets, meta, start, err := ReadHeader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	if strings.Join(names, ",") != "h,n,w" || !slices.Equal(offsets, []int64{0, 6, 14}) || meta["k"] != "v" {
		t.Errorf("tensors %v at %v, metadata %v", names, offsets, meta)
	}
	if int(start)+22 != len(data) || start%8 != 0 {
		t.Errorf("data starts at %d of %d bytes, want 22 bytes before the end, 8-byte aligned", start, len(data))
	}
	huge := binary.LittleEndian.AppendUint64(nil, MaxHeaderBytes+1)
	if _, _, _, _, err := ReadHeader(bytes.NewReader(huge)); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("a header length over the limit: error %v", err)
	}
}

// TestHeaderMatchesEncode: a writer that streams its tensors after Header writes the file
// Encode makes.
func TestHeaderMatchesEncode(t *testing.T) {
	tensors := []Tensor{Float32("b", []int{2}, []float32{1, 2}), {Name: "a", DType: U8, Shape: []int{3}, Data: []byte{7, 8, 9}}}
	want, err := Encode(tensors, map[string]string{"x": "y"})
	if err != nil {
		t.Fatal(err)
	}
	prefix, order, err := Header([]Info{{"b", F32, []int{2}}, {"a", U8, []int{3}}}, map[string]string{"x": "y"})
	if err != nil {
		t.Fatal(err)
	}
	got := prefix
	for _, i := range order {
		for _, tt := range tensors {
			if tt.Name == i.Name {
				got = append(got, tt.Data...)
			}
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("streamed file\n%q\nEncode's\n%q", got, want)
	}
}
