import * as arrow from 'apache-arrow';
import * as pq from 'parquet-wasm/esm/parquet_wasm.js';
import { readFileSync, writeFileSync } from 'fs';
await pq.default(readFileSync('node_modules/parquet-wasm/esm/parquet_wasm_bg.wasm'));
const ids = [10n, 11n, 12n];
const labels = [0n, 1n, 2n]; // int64, as pandas writes an integer column
const vecs = [[1, 2, 3], [4, 5, 6], [7, 8, 9.5]];
const listType = new arrow.List(new arrow.Field('item', new arrow.Float32(), true));
const table = new arrow.Table({
  id: arrow.vectorFromArray(ids, new arrow.Int64()),
  label: arrow.vectorFromArray(labels, new arrow.Int64()),
  embedding: arrow.vectorFromArray(vecs, listType),
});
const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(table, 'stream'));
const props = new pq.WriterPropertiesBuilder().setCompression(pq.Compression.SNAPPY).build();
writeFileSync('arrow-rs-list-item.parquet', pq.writeParquet(wasmTable, props));
console.log('ok');
