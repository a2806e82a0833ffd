"""Reads an embedding file with pyarrow, as a researcher would, for TestPyArrowReadsFixedSizeVectors.

Prints one JSON object: the embedding column's Arrow type, whether it is a fixed-size list, the
vectors as the rows x dim NumPy array pyarrow gives without a copy, the other columns and the
table's metadata.
"""

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq

table = pq.read_table(sys.argv[1])
embedding = table.column("embedding")
out = {
    "version": pa.__version__,
    "type": str(embedding.type),
    "fixed_size_list": pa.types.is_fixed_size_list(embedding.type),
    "nullable": {f.name: f.nullable for f in table.schema},
    "columns": {name: table.column(name).to_pylist() for name in ("id", "label", "key", "split", "class")},
    "metadata": {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()},
}
if out["fixed_size_list"]:
    vectors = embedding.combine_chunks()
    array = vectors.flatten().to_numpy(zero_copy_only=True).reshape(len(vectors), vectors.type.list_size)
    out.update(
        element=vectors.type.value_field.name,
        element_nullable=vectors.type.value_field.nullable,
        shape=list(array.shape),
        dtype=str(array.dtype),
        vectors=array.tolist(),
    )
print(json.dumps(out))
