import { DuckDBInstance } from '@duckdb/node-api';
const con = await (await DuckDBInstance.create(':memory:')).connect();
for (const q of [
  "DESCRIBE SELECT * FROM 'ours-emb.parquet'",
  "SELECT id, label, embedding FROM 'ours-emb.parquet'",
  "SELECT key, source_index, label, pass, octet_length(view1) AS v1, octet_length(view2) AS v2, height, width, channels, encoding FROM 'ours-ds/pass-001/*.parquet' ORDER BY source_index LIMIT 4",
  "SELECT key, value FROM parquet_kv_metadata('ours-ds/pass-000/part-00000-of-00003.parquet') WHERE key::VARCHAR IN ('dcl.seed','dcl.dataset')",
]) { const r = await con.runAndReadAll(q); console.log(JSON.stringify(r.getRowObjectsJson())); }
