//! Conversions of the WIT types every facet shares (`header-error`, declared in
//! `stele:log/wal`, and the integer widths of the WIT records). The two component builds have
//! separate generated bindings with identical shapes, so the conversions are written once, as a
//! macro, and instantiated for each. Each facet's own conversions are in its folder.

macro_rules! shared_conversions {
    ($wit:path) => {
        use stele::header::HeaderError;
        use $wit as wit;

        pub(crate) fn usize_of(v: u64) -> usize {
            usize::try_from(v).unwrap_or(usize::MAX)
        }

        pub(crate) fn u16_of(v: u32) -> u16 {
            u16::try_from(v).unwrap_or(u16::MAX)
        }

        pub(crate) fn from_wit_header(h: wit::HeaderError) -> HeaderError {
            match h {
                wit::HeaderError::TooShort(len) => HeaderError::TooShort { len },
                wit::HeaderError::BadMagic => HeaderError::BadMagic,
                wit::HeaderError::Checksum => HeaderError::Checksum,
                wit::HeaderError::WrongFamily(m) => HeaderError::WrongFamily {
                    found: u16_of(m.found),
                    expected: u16_of(m.expected),
                },
                wit::HeaderError::UnsupportedVersion(m) => HeaderError::UnsupportedVersion {
                    found: u16_of(m.found),
                    supported: u16_of(m.expected),
                },
                wit::HeaderError::NonzeroReserved => HeaderError::NonzeroReserved,
            }
        }
    };
}

/// For the plain build's bindings (`stele.wasm`).
pub(crate) mod plain {
    shared_conversions!(crate::embed::bindings::exports::stele::log::wal);
}

/// For the async build's bindings (`stele-async.wasm`).
pub(crate) mod with_async {
    shared_conversions!(crate::embed::bindings::engine_async::exports::stele::log::wal);
}
