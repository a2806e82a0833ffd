import { DuckDBInstance } from '@duckdb/node-api';
const inst = await DuckDBInstance.create(':memory:');
const con = await inst.connect();
// 5 rows of 4-d float32 vectors; label is INTEGER (int32), id BIGINT.
await con.run(`COPY (SELECT i::BIGINT AS id, (i % 3)::INTEGER AS label,
  [i*1.0, i*0.5, -i*1.0, 0.25]::FLOAT[] AS embedding FROM range(5) t(i))
  TO 'duckdb-list-element.parquet' (FORMAT PARQUET)`);
console.log('ok');
