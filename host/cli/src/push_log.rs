//! `stele push-log ...`: append from CSV or JSON lines, scan, compact, seal and unseal.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use stele::vfs::Vfs;
use stele_host::Mode;

use crate::common::{ModeArg, root_and_name};

#[derive(Subcommand)]
pub(crate) enum PushLogCommand {
    /// Push rows read from CSV (with a header line) or JSON lines (one object per line) as one
    /// frame, fsynced before this returns. The rows must fit the log's schema; a log with no
    /// frames yet takes `--refs` (the ref-table schema) or a schema inferred from the input.
    ///
    /// Example: `stele push-log append refs.log pushes.csv --refs`, where pushes.csv starts
    /// with `ref_name,target,push_seq,updated_ms` and an empty target deletes the ref.
    Append {
        /// The push-log file (created if missing).
        log: PathBuf,
        /// The input file; `-` reads standard input.
        input: PathBuf,
        /// The input's format; by default from INPUT's extension (.csv, else JSON lines).
        #[arg(long, value_enum)]
        format: Option<InputFormat>,
        /// For a new log: use the ref-table schema (ref_name utf8, target nullable utf8,
        /// push_seq u64, updated_ms i64) instead of inferring one.
        #[arg(long)]
        refs: bool,
        /// Split the input into pushes of at most this many rows (default: the whole input is
        /// one push, so it lands or fails as a whole).
        #[arg(long)]
        rows_per_push: Option<usize>,
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// Print every frame (offset, rows, the refs it sets when the log has the refs schema) and
    /// how the log ends. Read-only.
    Scan {
        /// The push-log file.
        path: PathBuf,
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
        /// JSON lines: one object per frame (offset and its rows, as arrow-json writes them),
        /// then one for how the log ends.
        #[arg(long)]
        json: bool,
    },
    /// Fold every frame into one, atomically (staged at `PATH.compacting`, fsynced, renamed
    /// over, directory fsynced). Takes the writer's lock.
    Compact {
        path: PathBuf,
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// Seal the log into a WebAssembly module (or component) as the custom section
    /// `stele.push-log.NAME`: an Arrow IPC file with one batch per push. FILE is replaced
    /// atomically; a section of the same name already in it is refused.
    Seal {
        /// The push-log file.
        log: PathBuf,
        /// The module name the section is sealed for.
        #[arg(long)]
        module: String,
        /// The WebAssembly file to append the section to.
        #[arg(long)]
        into: PathBuf,
    },
    /// Read the push-log sections of a WebAssembly file back: each section's pushes.
    Unseal {
        /// The WebAssembly file.
        file: PathBuf,
    },
}

pub(crate) fn push_log_command(command: PushLogCommand) -> Result<()> {
    match command {
        PushLogCommand::Append {
            log,
            input,
            format,
            refs,
            rows_per_push,
            mode,
        } => append(&log, &input, format, refs, rows_per_push, mode.into()),
        PushLogCommand::Scan {
            path,
            mode,
            json: true,
        } => scan_json(&path, mode.into()),
        PushLogCommand::Scan { path, mode, .. } => {
            let log = open_push_log(&path, mode.into())?;
            let shown = path.display();
            let refs_schema = log.schema().fields() == stele::push_log::refs::schema().fields();
            // Frames stream past; only the ref table's batches are kept, to fold them.
            let mut scan = log.scan().with_context(|| format!("{shown}"))?;
            let (mut frames, mut kept) = (0usize, Vec::new());
            for frame in scan.by_ref() {
                let frame = frame.with_context(|| format!("{shown}"))?;
                println!("frame @{} rows={}", frame.offset, frame.batch.num_rows());
                frames += 1;
                if refs_schema {
                    kept.push(frame.batch);
                }
            }
            let end = scan.end();
            drop(scan);
            if refs_schema {
                let table = stele::push_log::refs::fold(&kept)?;
                println!("refs: {}", table.len());
                for (name, entry) in &table {
                    println!(
                        "  {name} -> {} (push {}, {} ms)",
                        entry.target, entry.push_seq, entry.updated_ms
                    );
                }
            }
            println!("frames={frames} end={end:?}");
            Ok(())
        }
        PushLogCommand::Compact { path, mode } => {
            // Compaction reads every frame and writes them all again: about twice the file.
            let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
            let progress = crate::progress::bar(2 * bytes, "compacting");
            let log = open_push_log_with(&path, mode.into(), |fs| {
                Arc::new(crate::progress::ProgressVfs::new(fs, progress.clone()))
            })?;
            let r = log.compact().with_context(|| format!("{}", path.display()));
            progress.finish_and_clear();
            let r = r?;
            println!(
                "{}: {} frames ({} B) compacted to {} ({} B), {} rows",
                path.display(),
                r.frames_before,
                r.bytes_before,
                r.frames_after,
                r.bytes_after,
                r.rows
            );
            Ok(())
        }
        PushLogCommand::Seal { log, module, into } => {
            let pushes = open_push_log(&log, Mode::Native)?;
            let section = pushes
                .seal_section(&module)
                .with_context(|| format!("{}", log.display()))?;
            let wasm = std::fs::read(&into).with_context(|| format!("{}", into.display()))?;
            let sealed =
                sealed_module(&wasm, &section).with_context(|| format!("{}", into.display()))?;
            let staged = into.with_extension("wasm.sealing");
            std::fs::write(&staged, &sealed).with_context(|| format!("{}", staged.display()))?;
            std::fs::File::open(&staged)?.sync_all()?;
            std::fs::rename(&staged, &into).with_context(|| format!("{}", into.display()))?;
            println!(
                "{}: sealed {} ({} B of Arrow IPC file) into {}",
                log.display(),
                section.name,
                section.payload.len(),
                into.display()
            );
            Ok(())
        }
        PushLogCommand::Unseal { file } => {
            let wasm = std::fs::read(&file).with_context(|| format!("{}", file.display()))?;
            let sections =
                push_log_sections(&wasm).with_context(|| format!("{}", file.display()))?;
            if sections.is_empty() {
                bail!("{}: no stele.push-log section", file.display());
            }
            for section in sections {
                let (schema, pushes) = section
                    .pushes()
                    .with_context(|| format!("{}: section {}", file.display(), section.name))?;
                println!(
                    "{}: {} pushes, {} rows, schema [{}]",
                    section.name,
                    pushes.len(),
                    pushes.iter().map(|b| b.num_rows()).sum::<usize>(),
                    schema
                        .fields()
                        .iter()
                        .map(|f| format!("{}: {}", f.name(), f.data_type()))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                for (i, push) in pushes.iter().enumerate() {
                    println!("  push {i}: {} rows", push.num_rows());
                }
            }
            Ok(())
        }
    }
}

fn open_push_log(path: &std::path::Path, mode: Mode) -> Result<stele_host::PushLog> {
    open_push_log_with(path, mode, |fs| fs)
}

/// [`open_push_log`] over the real filesystem as `wrap` returns it.
fn open_push_log_with(
    path: &std::path::Path,
    mode: Mode,
    wrap: impl FnOnce(Arc<dyn Vfs>) -> Arc<dyn Vfs>,
) -> Result<stele_host::PushLog> {
    let (fs, name) = root_and_name(path)?;
    let fs = wrap(fs);
    let schema = stele::push_log::PushLog::detect_schema(&*fs, &name)
        .with_context(|| format!("{}", path.display()))?
        .with_context(|| format!("{}: no frames, so no schema to read", path.display()))?;
    Ok(stele_host::PushLog::new(fs, &name, schema, mode)?)
}

/// `wasm` with `section` appended as a custom section. Custom sections may follow the last
/// section of a module or a component, so nothing else changes.
fn sealed_module(wasm: &[u8], section: &stele::push_log::ReservedSection) -> Result<Vec<u8>> {
    if push_log_sections(wasm)?
        .iter()
        .any(|s| s.name == section.name)
    {
        bail!("already holds a section named {}", section.name);
    }
    let mut out = wasm.to_vec();
    use wasm_encoder::Section;
    wasm_encoder::CustomSection {
        name: section.name.as_str().into(),
        data: section.payload.as_slice().into(),
    }
    .append_to(&mut out);
    Ok(out)
}

/// The `stele.push-log.*` custom sections of a module or component.
fn push_log_sections(wasm: &[u8]) -> Result<Vec<stele::push_log::ReservedSection>> {
    let mut found = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::CustomSection(reader) =
            payload.context("not a valid WebAssembly file")?
            && reader.name().starts_with(stele::push_log::SECTION_PREFIX)
        {
            found.push(stele::push_log::ReservedSection {
                name: reader.name().to_owned(),
                payload: reader.data().to_vec(),
            });
        }
    }
    Ok(found)
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum InputFormat {
    /// Comma-separated values with a header line naming the columns.
    Csv,
    /// JSON lines: one object per line, keys naming the columns.
    Jsonl,
}

/// How many rows schema inference reads: enough to see past leading nulls, bounded so a huge
/// input is not parsed twice over.
const INFER_ROWS_MAX: usize = 10_000;

fn append(
    path: &std::path::Path,
    input: &std::path::Path,
    format: Option<InputFormat>,
    refs: bool,
    rows_per_push: Option<usize>,
    mode: Mode,
) -> Result<()> {
    let format = format.unwrap_or_else(|| match input.extension() {
        Some(ext) if ext.eq_ignore_ascii_case("csv") => InputFormat::Csv,
        _ => InputFormat::Jsonl,
    });
    let text = if input.as_os_str() == "-" {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut text).context("stdin")?;
        text
    } else {
        std::fs::read(input).with_context(|| format!("{}", input.display()))?
    };
    let (fs, name) = root_and_name(path)?;
    let existing = stele::push_log::PushLog::detect_schema(&*fs, &name)
        .with_context(|| format!("{}", path.display()))?;
    let schema = match existing {
        Some(schema) => schema,
        None if refs => stele::push_log::refs::schema(),
        None => std::sync::Arc::new(
            infer_schema(format, &text).with_context(|| format!("{}", input.display()))?,
        ),
    };
    let batches = parse_rows(format, &text, &schema, rows_per_push)
        .with_context(|| format!("{}: rows do not fit the log's schema", input.display()))?;
    if batches.iter().all(|b| b.num_rows() == 0) {
        bail!("{}: no rows", input.display());
    }
    let log = stele_host::PushLog::new(fs, &name, schema, mode)?;
    for batch in batches.iter().filter(|b| b.num_rows() > 0) {
        let offset = log
            .append(batch)
            .with_context(|| format!("{}", path.display()))?;
        println!(
            "{}: pushed {} rows at offset {offset} (fsynced)",
            path.display(),
            batch.num_rows()
        );
    }
    Ok(())
}

fn infer_schema(format: InputFormat, text: &[u8]) -> Result<arrow_schema::Schema> {
    Ok(match format {
        InputFormat::Csv => {
            arrow_csv::reader::Format::default()
                .with_header(true)
                .infer_schema(text, Some(INFER_ROWS_MAX))?
                .0
        }
        InputFormat::Jsonl => arrow_json::reader::infer_json_schema(text, Some(INFER_ROWS_MAX))?.0,
    })
}

/// The input's rows as batches of `schema`: one batch, or batches of `rows_per_push` rows.
/// Unknown JSON keys and missing CSV columns are errors, not silently dropped data.
fn parse_rows(
    format: InputFormat,
    text: &[u8],
    schema: &arrow_schema::SchemaRef,
    rows_per_push: Option<usize>,
) -> Result<Vec<arrow_array::RecordBatch>> {
    // arrow's readers produce batches of at most this many rows; one push per batch when
    // splitting, else they are concatenated into the one push.
    const READ_BATCH_ROWS: usize = 8192;
    let batch_rows = rows_per_push.unwrap_or(READ_BATCH_ROWS).max(1);
    let batches = match format {
        InputFormat::Csv => arrow_csv::ReaderBuilder::new(schema.clone())
            .with_header(true)
            // Columns are read by position: a header that names them in another order must
            // be refused, not pushed into the wrong columns.
            .with_header_validation(true)
            .with_batch_size(batch_rows)
            .build(text)?
            .collect::<Result<Vec<_>, _>>()?,
        InputFormat::Jsonl => arrow_json::ReaderBuilder::new(schema.clone())
            .with_strict_mode(true)
            .with_batch_size(batch_rows)
            .build(text)?
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(match rows_per_push {
        Some(_) => batches,
        None => vec![arrow_select::concat::concat_batches(schema, &batches)?],
    })
}

/// `stele push-log scan --json`.
fn scan_json(path: &std::path::Path, mode: Mode) -> Result<()> {
    use std::io::Write;
    let log = open_push_log(path, mode)?;
    let shown = path.display();
    let mut scan = log.scan().with_context(|| format!("{shown}"))?;
    let mut out = std::io::stdout().lock();
    let mut frames = 0usize;
    for frame in scan.by_ref() {
        let frame = frame.with_context(|| format!("{shown}"))?;
        let mut rows = arrow_json::ArrayWriter::new(Vec::new());
        rows.write(&frame.batch)?;
        rows.finish()?;
        let rows = rows.into_inner();
        // arrow-json writes nothing at all for a batch without rows.
        let rows = if rows.is_empty() {
            b"[]".to_vec()
        } else {
            rows
        };
        writeln!(
            out,
            "{{\"offset\":{},\"rows\":{}}}",
            frame.offset,
            String::from_utf8_lossy(&rows)
        )?;
        frames += 1;
    }
    let end = scan.end();
    writeln!(
        out,
        "{}",
        serde_json::json!({"frames": frames, "end": format!("{end:?}")})
    )?;
    Ok(())
}
