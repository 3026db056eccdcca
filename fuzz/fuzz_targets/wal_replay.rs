//! WAL replay over arbitrary bytes: must never panic, must return records or a typed error,
//! and must never allocate more than the bytes present (libFuzzer's -rss_limit_mb and
//! -malloc_limit_mb catch an allocation driven by a length field).

#![no_main]

use libfuzzer_sys::fuzz_target;
use stele::vfs::{MemVfs, OpenMode, Vfs};
use stele::wal::{LogSeq, WalReader, replay};

fuzz_target!(|data: &[u8]| {
    let vfs = MemVfs::new();
    vfs.set_contents("f", data.to_vec());
    let file = vfs.open("f", OpenMode::Existing).unwrap();
    let mut records = 0u64;
    let replayed = replay(&*file, LogSeq(0), |r| {
        assert!(r.payload.len() <= data.len());
        records += 1;
    });
    if let Ok(recovery) = &replayed {
        assert_eq!(recovery.records, records);
        assert!(recovery.valid_end <= data.len() as u64);
    }
    // The owning reader must agree with replay, record for record.
    let Ok(mut reader) = WalReader::open(std::sync::Arc::new(vfs.clone()), "f") else {
        assert!(replayed.is_err(), "replay accepted a header the reader refused");
        return;
    };
    let mut again = 0u64;
    while let Ok(Some(_)) = reader.next_record() {
        again += 1;
    }
    if replayed.is_ok() {
        assert_eq!(again, records);
    }
});
