//! A deterministic fuzz smoke run of WAL replay: a seeded corpus of valid logs, each mutated
//! many ways (bit flips, truncations, insertions, zeroed and 0xFF runs, huge length fields,
//! duplicated frames). Replay must never panic, must return either records or a typed error,
//! may only ever return a prefix of the original records (checksums forbid anything else), and
//! must never allocate much beyond the bytes the file holds. `fuzz/` runs the same target under
//! libFuzzer without a time bound.

use stele::vfs::{MemVfs, OpenMode, Vfs};
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalWriter, replay};
use stele_tests::alloc::{CountingAlloc, measure};
use stele_tests::crash::SplitMix;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

type Rec = (u64, u16, Vec<u8>);

fn valid_log(rng: &mut SplitMix) -> (Vec<u8>, Vec<Rec>) {
    let vfs = MemVfs::new();
    let first = rng.range(0, 1 << 40);
    let opts = WalOptions::single_file(DurabilityPolicy::Skip).with_first_seq(LogSeq(first));
    let w = WalWriter::create_with(&vfs, "l", opts).unwrap();
    let mut recs = Vec::new();
    for _ in 0..rng.range(0, 12) {
        let len = match rng.range(0, 4) {
            0 => 0,
            1 => rng.range(1, 16),
            2 => rng.range(16, 600),
            _ => rng.range(600, 3000),
        } as usize;
        let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let op = rng.next_u64() as u16;
        let seq = w.commit(op, &payload).unwrap();
        recs.push((seq.0, op, payload));
    }
    w.flush().unwrap();
    (vfs.contents("l").unwrap(), recs)
}

fn mutate(rng: &mut SplitMix, bytes: &mut Vec<u8>) {
    if bytes.is_empty() {
        bytes.extend((0..rng.range(0, 64)).map(|_| rng.next_u64() as u8));
        return;
    }
    let at = rng.range(0, bytes.len() as u64) as usize;
    match rng.range(0, 8) {
        0 => bytes[at] ^= 1 << rng.range(0, 8),
        1 => bytes.truncate(at),
        2 => {
            let junk: Vec<u8> = (0..rng.range(1, 40))
                .map(|_| rng.next_u64() as u8)
                .collect();
            bytes.splice(at..at, junk);
        }
        3 => {
            let end = (at + rng.range(1, 700) as usize).min(bytes.len());
            bytes[at..end].fill(0);
        }
        4 => {
            let end = (at + rng.range(1, 700) as usize).min(bytes.len());
            bytes[at..end].fill(0xFF);
        }
        5 => {
            // A huge length field at an arbitrary offset.
            let end = (at + 4).min(bytes.len());
            let huge = (rng.range(1 << 20, u32::MAX as u64) as u32).to_le_bytes();
            bytes[at..end].copy_from_slice(&huge[..end - at]);
        }
        6 => {
            // Duplicate a slice (a frame, often) somewhere later.
            let end = (at + rng.range(1, 300) as usize).min(bytes.len());
            let copy = bytes[at..end].to_vec();
            let to = rng.range(at as u64, bytes.len() as u64 + 1) as usize;
            bytes.splice(to..to, copy);
        }
        _ => bytes.extend((0..rng.range(1, 100)).map(|_| rng.next_u64() as u8)),
    }
}

#[test]
fn replay_survives_a_seeded_corpus_of_mutated_logs() {
    let mut rng = SplitMix(0xC0FFEE);
    let (mut ok, mut refused, mut cases) = (0, 0, 0);
    let mut worst_ratio = 0.0f64;
    for _ in 0..400 {
        let (original, recs) = valid_log(&mut rng);
        for _ in 0..25 {
            let mut bytes = original.clone();
            for _ in 0..rng.range(1, 4) {
                mutate(&mut rng, &mut bytes);
            }
            cases += 1;
            let vfs = MemVfs::new();
            vfs.set_contents("m", bytes.clone());
            let file = vfs.open("m", OpenMode::Existing).unwrap();
            let mut got: Vec<Rec> = Vec::new();
            let (result, seen) = measure(|| {
                replay(&*file, LogSeq(0), |r| {
                    got.push((r.seq.0, r.op, r.payload.to_vec()))
                })
            });
            // What replay itself held: its window, plus the copies this test keeps.
            let kept: usize =
                got.iter().map(|r| r.2.capacity() + 64).sum::<usize>() + got.capacity() * 64;
            let replay_peak = seen.peak_bytes.saturating_sub(kept);
            assert!(
                replay_peak <= bytes.len() + 4096,
                "replay of {} bytes allocated {replay_peak} bytes",
                bytes.len()
            );
            worst_ratio = worst_ratio.max(replay_peak as f64 / (bytes.len().max(1)) as f64);
            match result {
                Ok(recovery) => {
                    ok += 1;
                    assert_eq!(recovery.records as usize, got.len());
                    assert!(got.len() <= recs.len(), "replay invented records");
                    assert_eq!(
                        got[..],
                        recs[..got.len()],
                        "replay returned something other than a prefix"
                    );
                }
                Err(_typed) => refused += 1,
            }
        }
    }
    stele_tests::ci_line(&format!(
        "replay smoke: {cases} mutated logs, {ok} recovered a prefix, {refused} refused with a \
         typed error; peak replay allocation <= {worst_ratio:.2} x file size + 4 KiB"
    ));
}
