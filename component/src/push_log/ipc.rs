//! Arrow IPC for push-log frames: a frame body is one complete IPC stream (the schema message,
//! one record batch, end of stream), so any Arrow reader reads a frame body on its own.
//!
//! Decoding bytes from a file never lets a length field size an allocation: before arrow sees a
//! body, [`check_stream_lengths`] walks its messages and refuses any metadata or body length
//! beyond the bytes present (arrow's reader would allocate a claimed length first and read
//! after).

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_ipc::writer::{FileWriter, StreamWriter};
use arrow_schema::{ArrowError, SchemaRef};

/// The IPC stream of one batch: schema, the batch, end of stream.
pub fn encode_stream(batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, batch.schema_ref())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Walks the messages of an IPC stream in `bytes` and checks that every length it declares
/// lies within `bytes`. Returns where the stream ends: the byte after its end-of-stream marker.
/// Pure: no allocation.
pub fn check_stream_lengths(bytes: &[u8]) -> Result<usize, &'static str> {
    let mut at = 0usize;
    loop {
        let rest = &bytes[at..];
        let (meta_len, prefix) = match rest {
            [0xff, 0xff, 0xff, 0xff, a, b, c, d, ..] => (i32::from_le_bytes([*a, *b, *c, *d]), 8),
            [a, b, c, d, ..] => (i32::from_le_bytes([*a, *b, *c, *d]), 4),
            _ => return Err("IPC stream ends without an end-of-stream marker"),
        };
        if meta_len == 0 {
            return Ok(at + prefix);
        }
        let meta_len = usize::try_from(meta_len).map_err(|_| "negative IPC metadata length")?;
        let meta = rest
            .get(prefix..prefix + meta_len)
            .ok_or("IPC metadata length beyond the frame")?;
        let message =
            arrow_ipc::root_as_message(meta).map_err(|_| "IPC metadata is not a valid message")?;
        let body_len =
            usize::try_from(message.bodyLength()).map_err(|_| "negative IPC body length")?;
        let end = prefix
            .checked_add(meta_len)
            .and_then(|n| n.checked_add(body_len))
            .ok_or("IPC body length overflows")?;
        if end > rest.len() {
            return Err("IPC body length beyond the frame");
        }
        at += end;
    }
}

/// Decodes an IPC stream that holds exactly one batch, of whatever schema, and nothing after
/// its end-of-stream marker (so the bytes can be stored as a frame body as they are).
pub fn decode_one(body: &[u8]) -> Result<RecordBatch, String> {
    if check_stream_lengths(body)? != body.len() {
        return Err("bytes follow the IPC end-of-stream marker".into());
    }
    read_one_batch(body, None)
}

/// The one batch of a length-checked stream, refusing another schema than `schema` (if given)
/// before any batch is decoded.
fn read_one_batch(body: &[u8], schema: Option<&SchemaRef>) -> Result<RecordBatch, String> {
    let mut reader = StreamReader::try_new(Cursor::new(body), None).map_err(|e| e.to_string())?;
    if let Some(schema) = schema
        && reader.schema().fields() != schema.fields()
    {
        return Err(format!(
            "frame schema {:?} is not the log's schema {:?}",
            reader.schema(),
            schema
        ));
    }
    let batch = reader
        .next()
        .ok_or("the stream holds no batch")?
        .map_err(|e| e.to_string())?;
    if reader.next().is_some() {
        return Err("the stream holds more than one batch".into());
    }
    Ok(batch)
}

/// The schema an IPC stream starts with (a stream may hold only its schema).
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef, String> {
    check_stream_lengths(bytes).map_err(str::to_owned)?;
    let reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
    Ok(reader.schema())
}

/// The IPC stream of a schema alone (schema message, end of stream).
pub fn encode_schema(schema: &SchemaRef) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, schema)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Decodes a frame body: exactly one batch, whose schema is `schema`.
pub fn decode_stream(body: &[u8], schema: &SchemaRef) -> Result<RecordBatch, String> {
    check_stream_lengths(body)?;
    read_one_batch(body, Some(schema))
}

/// A standard Arrow IPC file holding `batches`, in order.
pub fn encode_file(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    let mut writer = FileWriter::try_new(&mut out, schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Reads every batch of an Arrow IPC file.
pub fn decode_file(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>), ArrowError> {
    let reader = FileReader::try_new(Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}
