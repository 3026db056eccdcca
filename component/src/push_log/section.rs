//! [`ReservedSection`]: a push log sealed for an archive. Its payload is a standard Arrow IPC
//! *file* holding one record batch per push, in push order, so any Arrow reader reads it; its
//! name is `stele.push-log.<module>`, what a WebAssembly custom section carrying it is called.

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_schema::{DataType, SchemaRef};

use super::{PushLogError, PushLogScan, ipc};

/// The prefix of every sealed section's name.
pub const SECTION_PREFIX: &str = "stele.push-log.";

/// A sealed push log: a name and an Arrow IPC file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedSection {
    /// The custom section's name: [`SECTION_PREFIX`] and the module name.
    pub name: String,
    /// An Arrow IPC file with one batch per push, in push order.
    pub payload: Vec<u8>,
}

impl ReservedSection {
    /// Seals what `scan` recovers: every push, split back at its `push_seq` seams. Refuses a
    /// log damaged in the middle.
    pub fn seal(
        mut scan: PushLogScan,
        schema: &SchemaRef,
        module_name: &str,
    ) -> Result<Self, PushLogError> {
        let mut pushes = Vec::new();
        for frame in scan.by_ref() {
            split_pushes(&frame?.batch, &mut pushes);
        }
        scan.refuse_corruption()?;
        Ok(ReservedSection {
            name: format!("{SECTION_PREFIX}{module_name}"),
            payload: ipc::encode_file(schema, &pushes)?,
        })
    }

    /// The module name the section was sealed for, if the name has the push-log prefix.
    pub fn module_name(&self) -> Option<&str> {
        self.name.strip_prefix(SECTION_PREFIX)
    }

    /// The schema and the pushes, one batch each, in push order.
    pub fn pushes(&self) -> Result<(SchemaRef, Vec<RecordBatch>), PushLogError> {
        Ok(ipc::decode_file(&self.payload)?)
    }
}

/// Splits a frame's batch back into its pushes: at every change of `push_seq` when the schema
/// has that u64 column (a compacted frame is a run of pushes), else the frame is one push.
/// Slices share the batch's buffers: nothing is copied.
fn split_pushes(batch: &RecordBatch, out: &mut Vec<RecordBatch>) {
    let seqs = batch
        .column_by_name("push_seq")
        .filter(|c| c.data_type() == &DataType::UInt64)
        .map(|c| c.as_primitive::<UInt64Type>().clone());
    let Some(seqs) = seqs else {
        out.push(batch.clone());
        return;
    };
    let mut start = 0;
    for row in 1..=batch.num_rows() {
        if row == batch.num_rows() || seqs.value(row) != seqs.value(start) {
            out.push(batch.slice(start, row - start));
            start = row;
        }
    }
    if batch.num_rows() == 0 {
        out.push(batch.clone());
    }
}
