//! The engine's kernels, with criterion: record encode and decode, the frame checksum, and a
//! replay of a 1 MiB WAL from memory. Run with `cargo bench -p stele --bench kernels`. These are
//! the costs under every commit and every recovery; `stele bench` measures the whole path.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stele::frame;
use stele::vfs::MemVfs;
use stele::wal::record;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalReader, WalWriter};

const PAYLOAD_SIZES: [usize; 2] = [128, 4096];

fn record_encode_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    for size in PAYLOAD_SIZES {
        let payload = vec![0xA5u8; size];
        group.throughput(Throughput::Bytes(record::encoded_len(size) as u64));
        let mut out = Vec::with_capacity(record::encoded_len(size));
        group.bench_function(format!("encode/{size}B"), |b| {
            b.iter(|| {
                out.clear();
                record::encode_into(&mut out, LogSeq(7), 1, black_box(&payload));
                black_box(&out);
            })
        });
        let encoded = out.clone();
        group.bench_function(format!("decode/{size}B"), |b| {
            b.iter(|| match frame::decode(black_box(&encoded)) {
                frame::Decoded::Frame { body } => black_box(record::decode_body(body)),
                _ => unreachable!("a valid record"),
            })
        });
    }
    group.finish();
}

fn checksum(c: &mut Criterion) {
    let mut group = c.benchmark_group("crc32c");
    for size in [128usize, 4096, 1 << 20] {
        let bytes = vec![0x5Au8; size];
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(format!("{size}B"), |b| {
            b.iter(|| frame::crc32c(black_box(&bytes)))
        });
    }
    group.finish();
}

fn replay_1_mib(c: &mut Criterion) {
    let vfs = MemVfs::new();
    let options = WalOptions::single_file(DurabilityPolicy::Skip).with_retained_bytes_max(0);
    let writer = WalWriter::create_with(&vfs, "replay.wal", options).unwrap();
    let payload = vec![0x5Au8; 128];
    let records = (1 << 20) / record::encoded_len(payload.len());
    for _ in 0..records {
        writer.commit(1, &payload).unwrap();
    }
    writer.flush().unwrap();
    drop(writer);
    let bytes = vfs.contents("replay.wal").unwrap().len();
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("1MiB-of-128B-records", |b| {
        b.iter(|| {
            let mut reader =
                WalReader::open(std::sync::Arc::new(vfs.clone()), "replay.wal").unwrap();
            let mut n = 0usize;
            while let Some(r) = reader.next_record().unwrap() {
                n += r.payload.len();
            }
            assert_eq!(n, records * payload.len());
        })
    });
    group.finish();
}

criterion_group!(kernels, record_encode_decode, checksum, replay_1_mib);
criterion_main!(kernels);
