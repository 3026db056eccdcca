// Runs stele-wasi.wasm, transpiled by `jco transpile`, under Node.js (host/tests/foreign_hosts.rs).
//
// usage: node stele_wasi_runner.mjs TRANSPILED.js DIR RECORDS
//
// Preopens DIR as the component's root, creates log.wal there, appends RECORDS durable records
// (the payloads foreign_hosts.rs expects), drops the writer, reopens the log to recover it, reads
// every record back with a reader, and prints one JSON line: what it recovered and read.
import { pathToFileURL } from 'node:url';
import { _setPreopens } from '@bytecodealliance/preview2-shim/filesystem';

const [transpiled, dir, records] = process.argv.slice(2);
// The adapter serves `vfs` from the first preopen, so this directory is the log's root.
_setPreopens({ '/': dir });
const { wal } = await import(pathToFileURL(transpiled).href);

// Node 20 has no Symbol.dispose; jco then falls back to Symbol.for('dispose').
const dispose = Symbol.dispose ?? Symbol.for('dispose');
const options = {
  policy: 'full-sync',
  firstSeq: 1n,
  groupBytesMax: undefined,
  retainedBytesMax: 0n,
  segmentBytes: undefined,
};
const payload = (i) => `record ${i} ${'x'.repeat(i % 97)}`;

function explain(e) {
  // A WIT `result` error reaches JS as a thrown ComponentError carrying the variant.
  return JSON.stringify(e?.payload ?? String(e), (_, v) => (typeof v === 'bigint' ? Number(v) : v));
}

try {
  const writer = wal.Writer.create('log.wal', options);
  const encoder = new TextEncoder();
  for (let i = 0; i < Number(records); i++) {
    const seq = writer.commitDurable(1, encoder.encode(payload(i)));
    if (seq !== BigInt(i + 1)) throw new Error(`record ${i} got seq ${seq}`);
  }
  writer[dispose]();

  const [reopened, recovery] = wal.Writer.open('log.wal', options);
  reopened[dispose]();

  const reader = wal.Reader.open('log.wal');
  const decoder = new TextDecoder();
  const payloads = [];
  for (;;) {
    const batch = reader.nextBatch(64);
    if (batch.length === 0) break;
    for (const record of batch) payloads.push(decoder.decode(record.payload));
  }
  reader[dispose]();

  console.log(
    JSON.stringify({
      recovered_records: Number(recovery.records),
      recovery_end: recovery.end,
      payloads,
    }),
  );
} catch (e) {
  console.error(`stele-wasi under Node.js failed: ${explain(e)}`);
  process.exit(1);
}
