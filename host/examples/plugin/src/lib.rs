//! The plugin that `host/examples/plugin_host.rs` runs (world `example-plugin`): untrusted
//! code that keeps a durable log without any file access of its own. It imports
//! `stele:log/wal`; `host/build.rs` plugs the engine component into that import with
//! `wac plug`, so the composed plugin imports only `stele:log/vfs`, which the host serves from a
//! directory it chose.

#![cfg(target_arch = "wasm32")]

use stele::log::wal::{CommitRecord, DurabilityPolicy, Reader, WalOptions, Writer};

wit_bindgen::generate!({
    world: "stele-example:plugin/example-plugin",
    path: ["../../../wit", "wit"],
    // `stele:log` is another package: generate its interfaces here too.
    generate_all,
});

struct Plugin;

export!(Plugin);

/// Records the plugin asks for per `next-batch`: small, so a long log is read in steps.
const READ_BATCH_RECORDS: u32 = 256;

/// The op code of an event record: the plugin's own choice, kept in every record.
const OP_EVENT: u16 = 1;

impl Guest for Plugin {
    fn record_events(path: String, events: Vec<String>) -> Result<Vec<String>, String> {
        let options = WalOptions {
            policy: DurabilityPolicy::FullSync,
            first_seq: 1,
            group_bytes_max: None,
            retained_bytes_max: 0,
            segment_bytes: None,
        };
        let (writer, _recovery) =
            Writer::open(&path, options).map_err(|e| format!("open {path}: {e:?}"))?;
        if !events.is_empty() {
            let records = events
                .into_iter()
                .map(|event| CommitRecord {
                    op: OP_EVENT,
                    payload: event.into_bytes(),
                })
                .collect::<Vec<_>>();
            // One group, one fsync: durable when this returns.
            let count = records.len();
            let seqs = writer
                .commit_many_durable(&records)
                .map_err(|e| format!("commit to {path}: {e:?}"))?;
            note(&format!(
                "{path}: {count} events durable, seqs {}..{}",
                seqs.start, seqs.end
            ));
        }
        drop(writer);

        let reader = Reader::open(&path).map_err(|e| format!("read {path}: {e:?}"))?;
        let mut payloads = Vec::new();
        loop {
            let batch = reader
                .next_batch(READ_BATCH_RECORDS)
                .map_err(|e| format!("read {path}: {e:?}"))?;
            if batch.is_empty() {
                return Ok(payloads);
            }
            for record in batch {
                payloads.push(
                    String::from_utf8(record.payload)
                        .map_err(|_| format!("record {} is not UTF-8", record.seq))?,
                );
            }
        }
    }

    fn commit_each(
        path: String,
        count: u32,
        payload_bytes: u32,
        durable: bool,
    ) -> Result<u64, String> {
        let options = WalOptions {
            // Under a syncing policy a lone writer's `commit` leads its group and waits for
            // the sync; `skip` is what makes the non-durable loop non-durable.
            policy: if durable {
                DurabilityPolicy::Barrier
            } else {
                DurabilityPolicy::Skip
            },
            first_seq: 1,
            group_bytes_max: None,
            retained_bytes_max: 0,
            segment_bytes: None,
        };
        let writer = Writer::create(&path, options).map_err(|e| format!("create {path}: {e:?}"))?;
        let payload = vec![0x5A; payload_bytes as usize];
        let mut last = 0;
        for _ in 0..count {
            last = if durable {
                writer.commit_durable(OP_EVENT, &payload)
            } else {
                writer.commit(OP_EVENT, &payload)
            }
            .map_err(|e| format!("commit to {path}: {e:?}"))?;
        }
        writer.flush().map_err(|e| format!("flush {path}: {e:?}"))?;
        Ok(last)
    }
}
