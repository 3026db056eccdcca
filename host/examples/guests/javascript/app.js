// A JavaScript component that keeps an event log and a key/value state in Stele (world
// `events-guest`, `host/examples/guests/wit/world.wit`).
//
// It sees Stele only through the `stele:log/wal` and `stele:log/journal` imports: composed with
// `stele.wasm`, the engine serves those imports inside the composed component, and the host
// serves the engine's storage.
// Built with componentize-js (`npm run build`, see package.json), from `wit/`: `world.wit` and
// `wit/deps/stele/`, Stele's WIT (`wit/` of the checkout, or of the `stele-components` package).
//
// How the WIT reads in JavaScript: a resource is a class (`Writer.open` is its static `open`),
// a record is an object with camelCase fields, u64 is a BigInt, an enum is its case's name as a
// string, `list<u8>` is a Uint8Array. An imported call that returns `err` throws; the thrown
// error's `payload` is the typed `wal-error`, a variant: `{ tag: 'payload-too-large', val:
// { bytes, bytesMax } }`. An export returns `err` with the value it throws: here a string,
// this world's error type. (Throwing an `Error` instead traps the instance: the bindings
// rethrow any `Error` that has no `payload`.)

import { Writer as JournalWriter, replay } from 'stele:log/journal@0.9.0';
import { Reader, Writer } from 'stele:log/wal@0.9.0';

// The op every event is committed with: a u16 of the application's, stored beside the payload.
const OP_EVENT = 1;

// Records asked of the reader per call: each call copies at most this many payloads out of the
// engine, so a long log is read in bounded pieces.
const READ_BATCH_RECORDS = 256;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

// The open log: one instance runs one call at a time, so module state is enough.
let writer = null;
let path = null;
let durable = false;

// The typed error as JavaScript shows it: the error's class and message, then its payload (the
// variant's tag and value, BigInts as digits).
function describe(error) {
  if (error && typeof error === 'object' && 'payload' in error) {
    const payload = JSON.stringify(error.payload, (_, v) => (typeof v === 'bigint' ? `${v}` : v));
    return `${error.constructor.name}: ${error.message}; payload ${payload}`;
  }
  return `${error}`;
}

// Runs `step`; a thrown error becomes this world's `err` (a string): what was being done, then
// the error.
function attempt(what, step) {
  try {
    return step();
  } catch (error) {
    throw `${what}: ${describe(error)}`;
  }
}

export function openLog(logPath, policy) {
  closeLog(); // the previous writer lets go of its log (and lock) first
  const options = {
    policy,
    firstSeq: 1n,
    groupBytesMax: undefined,
    retainedBytesMax: 0n,
    segmentBytes: undefined,
  };
  const [opened, recovery] = attempt(`open ${logPath}`, () => Writer.open(logPath, options));
  writer = opened;
  path = logPath;
  durable = policy !== 'skip';
  return recovery.nextSeq;
}

export function recordEvents(events) {
  if (writer === null) {
    throw 'record-events: no log is open (call open-log first)';
  }
  return attempt(`commit to ${path}`, () => {
    let last = 0n;
    for (const event of events) {
      const payload = encoder.encode(event);
      last = durable ? writer.commitDurable(OP_EVENT, payload) : writer.commit(OP_EVENT, payload);
    }
    if (!durable) {
      writer.flush();
    }
    return last;
  });
}

export function readEvents(firstSeq) {
  if (path === null) {
    throw 'read-events: no log is open (call open-log first)';
  }
  return attempt(`read ${path}`, () => {
    const reader = Reader.openAt(path, firstSeq);
    try {
      const events = [];
      for (;;) {
        const batch = reader.nextBatch(READ_BATCH_RECORDS);
        if (batch.length === 0) {
          return events;
        }
        for (const record of batch) {
          events.push(decoder.decode(record.payload));
        }
      }
    } finally {
      reader[Symbol.dispose]();
    }
  });
}

export function closeLog() {
  // Released now, not whenever the garbage collector gets to it: the writer holds the log's
  // lock, and the engine flushes on drop.
  if (writer !== null) {
    writer[Symbol.dispose]();
    writer = null;
  }
}

export function remember(journalPath, key, value) {
  // The op as data: the engine frames and checksums it (FORMAT.md section 4).
  const op =
    value === undefined
      ? { tag: 'delete', val: encoder.encode(key) }
      : { tag: 'set', val: { key: encoder.encode(key), value: encoder.encode(value) } };
  attempt(`remember ${key} in ${journalPath}`, () => {
    const journal = JournalWriter.open(journalPath);
    try {
      journal.appendOps([op]);
    } finally {
      journal[Symbol.dispose]();
    }
  });
}

export function recall(journalPath) {
  const [ops] = attempt(`recall ${journalPath}`, () => replay(journalPath));
  const state = new Map();
  for (const op of ops) {
    if (op.tag === 'set') {
      state.set(decoder.decode(op.val.key), decoder.decode(op.val.value));
    } else if (op.tag === 'delete') {
      state.delete(decoder.decode(op.val));
    } else {
      state.clear();
    }
  }
  return [...state].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}
