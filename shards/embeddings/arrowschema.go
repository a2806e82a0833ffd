package embeddings

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// arrowSchemaKey is the footer key under which Arrow's Parquet readers (pyarrow and so pandas,
// arrow-go, arrow-rs) find the Arrow schema a file was written from: base64 of an Arrow IPC
// stream holding only the schema message, as Arrow's own writers store it. Parquet has no
// fixed-size list, so without it the embedding column reads as a variable-length list; with
// it, as fixed_size_list<float>[dim], which converts to a rows × dim array with no copy.
const arrowSchemaKey = "ARROW:schema"

// arrowSchema returns arrowSchemaKey's value for files of dim-dimensional vectors: Row's
// columns as Arrow types (derived from the Parquet schema, so the two cannot disagree), the
// embedding as a fixed-size list whose element field has the Parquet leaf's name, the name
// Arrow's readers match it by. footer is the file's other key-value metadata, which the
// schema carries too: Arrow's readers give a table the schema's metadata, not the footer's.
func arrowSchema(dim int, footer map[string]string) (string, error) {
	var fields []arrow.Field
	for _, f := range schema.Fields() {
		af, err := arrowField(f, dim)
		if err != nil {
			return "", fmt.Errorf("embedding schema: column %s: %w", f.Name(), err)
		}
		fields = append(fields, af)
	}
	var buf bytes.Buffer
	// A writer closed before any record writes the schema message and the end-of-stream
	// marker: the stream Arrow's Parquet writers encode.
	keys := slices.Sorted(maps.Keys(footer))
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = footer[k]
	}
	md := arrow.NewMetadata(keys, values)
	w := ipc.NewWriter(&buf, ipc.WithSchema(arrow.NewSchema(fields, &md)))
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("embedding schema: serialising the Arrow schema: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// arrowField maps one column of the embedding schema to the Arrow field Arrow's readers make of
// it, with the list as a fixed-size list of dim: only the kinds the schema uses.
func arrowField(f parquet.Field, dim int) (arrow.Field, error) {
	af := arrow.Field{Name: f.Name(), Nullable: f.Optional()}
	if f.Repeated() {
		return af, fmt.Errorf("a repeated column has no Arrow field here")
	}
	switch lt := f.Type().LogicalType(); {
	case isLogical[*format.ListType](lt):
		// The 3-level LIST: group (LIST) { repeated group list { element } }.
		list := f.Fields()
		if len(list) != 1 || !list[0].Repeated() || len(list[0].Fields()) != 1 {
			return af, fmt.Errorf("a LIST without the 3-level layout")
		}
		elem, err := arrowField(list[0].Fields()[0], dim)
		if err != nil {
			return af, err
		}
		af.Type = arrow.FixedSizeListOfField(int32(dim), elem)
	case !f.Leaf():
		return af, fmt.Errorf("a group has no Arrow field here")
	case f.Type().Kind() == parquet.Int64:
		af.Type = arrow.PrimitiveTypes.Int64
	case f.Type().Kind() == parquet.Int32:
		af.Type = arrow.PrimitiveTypes.Int32
	case f.Type().Kind() == parquet.Float:
		af.Type = arrow.PrimitiveTypes.Float32
	case f.Type().Kind() == parquet.ByteArray && isLogical[*format.StringType](lt):
		af.Type = arrow.BinaryTypes.String
	default:
		return af, fmt.Errorf("type %s has no Arrow field here", f.Type())
	}
	return af, nil
}

// isLogical reports whether lt (nil for none) holds the annotation T.
func isLogical[T format.LogicalTypeValue](lt *format.LogicalType) bool {
	if lt == nil {
		return false
	}
	_, ok := lt.Value.(T)
	return ok
}
