//! Refs on a push log: each row sets (or, with a null target, deletes) a ref, and carries the
//! push it belongs to (`push_seq`) and when (`updated_ms`). [`fold`] gives the current ref table.
//!
//! The ordering key is `push_seq`, never the frame index: compaction merges frames, so a frame
//! is a run of pushes after it, and only `push_seq` still says where one push ended. `fold`
//! therefore gives the same table before and after compaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// The refs schema: `ref_name` (utf8), `target` (nullable utf8: null deletes), `push_seq`
/// (u64), `updated_ms` (i64).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ref_name", DataType::Utf8, false),
        Field::new("target", DataType::Utf8, true),
        Field::new("push_seq", DataType::UInt64, false),
        Field::new("updated_ms", DataType::Int64, false),
    ]))
}

/// One live ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefEntry {
    /// What the ref points at.
    pub target: String,
    /// The push that wrote it last.
    pub push_seq: u64,
    /// When that push says it was written, in milliseconds.
    pub updated_ms: i64,
}

/// A batch that does not have the refs schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a refs batch: {0}")]
pub struct NotRefs(String);

/// The current ref table after `batches`, in order: for each ref, the write with the highest
/// `push_seq` wins (between rows of one push, the later row), and a null target deletes.
pub fn fold<'a>(
    batches: impl IntoIterator<Item = &'a RecordBatch>,
) -> Result<BTreeMap<String, RefEntry>, NotRefs> {
    // Deletions are kept until the end: a delete at push 7 must beat a set at push 5 that a
    // later row carries.
    let mut latest: BTreeMap<String, (u64, Option<String>, i64)> = BTreeMap::new();
    for batch in batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| NotRefs(format!("no `{name}` column")))
        };
        let names = column("ref_name")?
            .as_string_opt::<i32>()
            .ok_or_else(|| NotRefs("`ref_name` is not utf8".into()))?;
        let targets = column("target")?
            .as_string_opt::<i32>()
            .ok_or_else(|| NotRefs("`target` is not utf8".into()))?;
        let seqs = column("push_seq")?
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| NotRefs("`push_seq` is not u64".into()))?;
        let times = column("updated_ms")?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| NotRefs("`updated_ms` is not i64".into()))?;
        for row in 0..batch.num_rows() {
            if names.is_null(row) || seqs.is_null(row) || times.is_null(row) {
                return Err(NotRefs(format!("row {row} has a null key column")));
            }
            let seq = seqs.value(row);
            let target = (!targets.is_null(row)).then(|| targets.value(row).to_owned());
            let entry = (seq, target, times.value(row));
            match latest.get_mut(names.value(row)) {
                Some(current) if current.0 > seq => {}
                Some(current) => *current = entry,
                None => {
                    latest.insert(names.value(row).to_owned(), entry);
                }
            }
        }
    }
    Ok(latest
        .into_iter()
        .filter_map(|(name, (push_seq, target, updated_ms))| {
            target.map(|target| {
                (
                    name,
                    RefEntry {
                        target,
                        push_seq,
                        updated_ms,
                    },
                )
            })
        })
        .collect())
}
