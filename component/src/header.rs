//! The 32-byte header that opens every Stele file, whatever its family.
//!
//! ```text
//! offset  size  field
//!      0     8  magic            b"STELElog"
//!      8     2  family           u16 LE: 1 = WAL, 2 = journal, 3 = push log
//!     10     2  version          u16 LE: the family's format version
//!     12     4  flags            u32 LE: reserved, must be zero
//!     16     8  family word      u64 LE: the WAL's first seq; zero for the other families
//!     24     4  reserved         must be zero
//!     28     4  checksum         CRC32C (Castagnoli) of bytes 0..28
//! ```
//!
//! A header is valid when the magic matches, the checksum matches and the reserved bytes are
//! zero. A reader refuses a valid header of another family or of a version it does not write,
//! with a typed error naming both values, rather than guessing at bytes it does not understand.

use crate::frame::crc32c;

/// The first eight bytes of every Stele file.
pub const MAGIC: [u8; 8] = *b"STELElog";

const MAGIC_OFFSET: usize = 0;
const FAMILY_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const VERSION_OFFSET: usize = FAMILY_OFFSET + size_of::<u16>();
const FLAGS_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
const FAMILY_WORD_OFFSET: usize = FLAGS_OFFSET + size_of::<u32>();
const RESERVED_OFFSET: usize = FAMILY_WORD_OFFSET + size_of::<u64>();
const CHECKSUM_OFFSET: usize = RESERVED_OFFSET + size_of::<u32>();
/// Size of the header in bytes.
pub const HEADER_BYTES: usize = CHECKSUM_OFFSET + size_of::<u32>();

const _: () = assert!(
    HEADER_BYTES == 32,
    "docs/FORMAT.md documents a 32-byte header"
);

/// Which log a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// A write-ahead log file, or one segment of a segmented WAL.
    Wal,
    /// A journal.
    Journal,
    /// A push log.
    PushLog,
    /// The checkpoint file of a segmented WAL: the header alone, whose family word is the seq
    /// that the log's owner has absorbed through.
    WalCheckpoint,
}

impl Family {
    /// The family's code in the header.
    pub const fn code(self) -> u16 {
        match self {
            Family::Wal => 1,
            Family::Journal => 2,
            Family::PushLog => 3,
            Family::WalCheckpoint => 4,
        }
    }

    /// The family a header code names, if any.
    pub const fn from_code(code: u16) -> Option<Self> {
        match code {
            1 => Some(Family::Wal),
            2 => Some(Family::Journal),
            3 => Some(Family::PushLog),
            4 => Some(Family::WalCheckpoint),
            _ => None,
        }
    }

    /// The family's name in messages and `stele inspect`.
    pub const fn name(self) -> &'static str {
        match self {
            Family::Wal => "wal",
            Family::Journal => "journal",
            Family::PushLog => "push-log",
            Family::WalCheckpoint => "wal-checkpoint",
        }
    }
}

/// A decoded, checksum-verified header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Which log the file holds.
    pub family: Family,
    /// The family's format version.
    pub version: u16,
    /// Family-specific: the first sequence number of a WAL (or WAL segment), the checkpointed
    /// seq of a WAL checkpoint.
    pub family_word: u64,
}

/// Why a header was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The file ends before the header does.
    #[error("file is {len} bytes, shorter than the {HEADER_BYTES}-byte header")]
    TooShort {
        /// The file's length.
        len: u64,
    },
    /// The first eight bytes are not [`MAGIC`].
    #[error("not a Stele file: bad magic")]
    BadMagic,
    /// The header's checksum does not match its bytes.
    #[error("header checksum mismatch")]
    Checksum,
    /// A valid header of another family.
    #[error("file holds family code {found}, expected {expected}")]
    WrongFamily {
        /// The code in the file.
        found: u16,
        /// The code the reader expected.
        expected: u16,
    },
    /// A valid header of a version this build does not read.
    #[error("format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version in the file.
        found: u16,
        /// The version this build reads and writes.
        supported: u16,
    },
    /// Bytes reserved for later versions are set.
    #[error("reserved header bytes are not zero")]
    NonzeroReserved,
}

impl FileHeader {
    /// The header's 32 bytes, checksum included.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[MAGIC_OFFSET..FAMILY_OFFSET].copy_from_slice(&MAGIC);
        out[FAMILY_OFFSET..VERSION_OFFSET].copy_from_slice(&self.family.code().to_le_bytes());
        out[VERSION_OFFSET..FLAGS_OFFSET].copy_from_slice(&self.version.to_le_bytes());
        out[FAMILY_WORD_OFFSET..RESERVED_OFFSET].copy_from_slice(&self.family_word.to_le_bytes());
        let crc = crc32c(&out[..CHECKSUM_OFFSET]);
        out[CHECKSUM_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies a header, without judging family or version: see [`Self::decode_expecting`].
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderError> {
        let Some(bytes) = bytes.get(..HEADER_BYTES) else {
            return Err(HeaderError::TooShort {
                len: bytes.len() as u64,
            });
        };
        if bytes[..FAMILY_OFFSET] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        if crc32c(&bytes[..CHECKSUM_OFFSET]) != le_u32(&bytes[CHECKSUM_OFFSET..]) {
            return Err(HeaderError::Checksum);
        }
        if le_u32(&bytes[FLAGS_OFFSET..]) != 0 || le_u32(&bytes[RESERVED_OFFSET..]) != 0 {
            return Err(HeaderError::NonzeroReserved);
        }
        let family_code = u16::from_le_bytes([bytes[FAMILY_OFFSET], bytes[FAMILY_OFFSET + 1]]);
        // An unknown family code is reported as a mismatch by `expect`; here it must still
        // decode, so keep the raw code in a family-shaped error instead.
        let family = Family::from_code(family_code).ok_or(HeaderError::WrongFamily {
            found: family_code,
            expected: 0,
        })?;
        Ok(FileHeader {
            family,
            version: u16::from_le_bytes([bytes[VERSION_OFFSET], bytes[VERSION_OFFSET + 1]]),
            family_word: u64::from_le_bytes(
                bytes[FAMILY_WORD_OFFSET..RESERVED_OFFSET]
                    .try_into()
                    .expect("8 bytes"),
            ),
        })
    }

    /// Decodes a header and checks it names `family` at `version`.
    pub fn decode_expecting(
        bytes: &[u8],
        family: Family,
        version: u16,
    ) -> Result<Self, HeaderError> {
        let header = Self::decode(bytes).map_err(|err| match err {
            HeaderError::WrongFamily { found, .. } => HeaderError::WrongFamily {
                found,
                expected: family.code(),
            },
            other => other,
        })?;
        if header.family != family {
            return Err(HeaderError::WrongFamily {
                found: header.family.code(),
                expected: family.code(),
            });
        }
        if header.version != version {
            return Err(HeaderError::UnsupportedVersion {
                found: header.version,
                supported: version,
            });
        }
        Ok(header)
    }
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_pins_layout() {
        let h = FileHeader {
            family: Family::Wal,
            version: 1,
            family_word: 42,
        };
        let bytes = h.encode();
        assert_eq!(&bytes[..8], b"STELElog");
        assert_eq!(&bytes[8..10], &[1, 0]);
        assert_eq!(&bytes[10..12], &[1, 0]);
        assert_eq!(&bytes[16..24], &42u64.to_le_bytes());
        assert_eq!(FileHeader::decode_expecting(&bytes, Family::Wal, 1), Ok(h));
    }

    #[test]
    fn refuses_each_kind_of_bad_header() {
        let good = FileHeader {
            family: Family::Wal,
            version: 1,
            family_word: 0,
        }
        .encode();
        assert_eq!(
            FileHeader::decode(&good[..10]),
            Err(HeaderError::TooShort { len: 10 })
        );
        let mut bad = good;
        bad[0] ^= 1;
        assert_eq!(FileHeader::decode(&bad), Err(HeaderError::BadMagic));
        let mut bad = good;
        bad[17] ^= 1;
        assert_eq!(FileHeader::decode(&bad), Err(HeaderError::Checksum));
        let newer = FileHeader {
            family: Family::Wal,
            version: 9,
            family_word: 0,
        }
        .encode();
        assert_eq!(
            FileHeader::decode_expecting(&newer, Family::Wal, 1),
            Err(HeaderError::UnsupportedVersion {
                found: 9,
                supported: 1
            })
        );
        let journal = FileHeader {
            family: Family::Journal,
            version: 1,
            family_word: 0,
        }
        .encode();
        assert_eq!(
            FileHeader::decode_expecting(&journal, Family::Wal, 1),
            Err(HeaderError::WrongFamily {
                found: 2,
                expected: 1
            })
        );
    }
}
