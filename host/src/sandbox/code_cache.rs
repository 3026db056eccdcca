//! The compiled-code cache: machine code for the embedded components, kept on disk between
//! processes, so that a process's first sandboxed call does not wait for Cranelift.
//!
//! Compiling `stele-async.wasm` and `stele.wasm` takes seconds of CPU (3.5 s of wall time for
//! both on this project's 2-vCPU machine); loading the compiled artifact back takes
//! milliseconds. What it owns and promises:
//! - **One file per (component, engine).** The name carries a hash of the component's bytes and
//!   of [`Engine::precompile_compatibility_hash`] (wasmtime's version, target, compiler flags,
//!   wasm features and tunables), so an engine configured differently, another wasmtime or
//!   another build of the component never picks up a file that is not its own.
//! - **A miss, a damaged file or a mismatch compiles; it never crashes.** Each file ends in a
//!   CRC-32C of its contents, checked before wasmtime sees a byte; wasmtime then checks its own
//!   header against the engine. Either failure is a [`CacheOutcome::Replaced`], and the fresh
//!   compilation is written back.
//! - **Writes are atomic.** A file is written under a temporary name and renamed into place,
//!   so a reader sees a whole file or none; two processes that miss at once each write a whole
//!   file and the later rename wins. No fsync: a file lost to a crash is only a later miss.
//! - **Trust.** Loading compiled code runs it, and the CRC catches damage, not malice: the
//!   cache directory must be writable only by the user that runs Stele. A missing directory
//!   is made with mode 0700.
//! - **Off unless asked.** The library never picks a directory and reads no environment: the
//!   embedder passes one ([`crate::runtime::RuntimeOptions::with_code_cache_dir`]), or the
//!   runtime compiles in every process and writes nothing. The `stele` CLI turns it on (its
//!   `STELE_CODE_CACHE`, else `$XDG_CACHE_HOME/stele`, else `$HOME/.cache/stele`).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// Ends every cache file, after the CRC: tells a cache file from any other file that happens to
/// carry the name, before the CRC is even computed.
const TRAILER_MAGIC: &[u8; 4] = b"STLc";

/// CRC-32C (4 bytes, little-endian) then [`TRAILER_MAGIC`].
const TRAILER_BYTES: usize = 8;

/// How a component was made ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cache; nothing was compiled.
    Hit,
    /// Not in the cache: compiled, then stored.
    Compiled {
        /// Whether the compiled code reached the cache (a failed write is not an error).
        stored: bool,
    },
    /// The cache held a file that could not be used: compiled, then stored over it.
    Replaced {
        /// Why the file could not be used: a read error, a bad checksum, an engine mismatch.
        reason: String,
        /// Whether the compiled code reached the cache.
        stored: bool,
    },
    /// No cache: compiled.
    Uncached,
}

/// The file that holds `wasm` compiled for `engine` under `dir`; `name` only makes it readable.
pub fn file_for(dir: &Path, engine: &Engine, name: &str, wasm: &[u8]) -> PathBuf {
    // SipHash with fixed keys: the same inputs give the same name in every process of this
    // build. A collision needs two distinct (component, engine) pairs with one 64-bit hash, and
    // would still be caught by wasmtime's own header check, or fail as a wrong-component link.
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    wasm.hash(&mut hasher);
    dir.join(format!(
        "{name}-{}-{:016x}.cwasm",
        env!("CARGO_PKG_VERSION"),
        hasher.finish()
    ))
}

/// `wasm` compiled for `engine`: from the cache under `dir` when it holds a good copy, else
/// compiled (and then stored there). `dir` `None` compiles without a cache. Fails only when
/// compiling fails.
pub fn load_or_compile(
    engine: &Engine,
    name: &str,
    wasm: &[u8],
    dir: Option<&Path>,
) -> wasmtime::Result<(Component, CacheOutcome)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, wasm)?, CacheOutcome::Uncached));
    };
    let file = file_for(dir, engine, name, wasm);
    let unusable = match std::fs::read(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("read {}: {e}", file.display())),
        Ok(bytes) => match load(engine, &bytes) {
            Ok(component) => return Ok((component, CacheOutcome::Hit)),
            Err(reason) => Some(format!("{}: {reason}", file.display())),
        },
    };
    let compiled = engine.precompile_component(wasm)?;
    // SAFETY: the bytes are what `precompile_component` on this engine just returned.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    let stored = match store(dir, &file, &compiled) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(file = %file.display(), error = %e, "compiled-code cache not written");
            false
        }
    };
    let outcome = match unusable {
        None => CacheOutcome::Compiled { stored },
        Some(reason) => {
            tracing::debug!(%reason, "compiled-code cache file replaced");
            CacheOutcome::Replaced { reason, stored }
        }
    };
    Ok((component, outcome))
}

/// A cache file's component, or why it cannot be used.
fn load(engine: &Engine, file_bytes: &[u8]) -> Result<Component, String> {
    let Some(body_len) = file_bytes.len().checked_sub(TRAILER_BYTES) else {
        return Err(format!(
            "{} bytes, shorter than its trailer",
            file_bytes.len()
        ));
    };
    let (body, trailer) = file_bytes.split_at(body_len);
    if &trailer[4..] != TRAILER_MAGIC {
        return Err("no cache trailer".into());
    }
    let crc_stored = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
    let crc_read = crc32c::crc32c(body);
    if crc_stored != crc_read {
        return Err(format!(
            "checksum {crc_read:#010x} does not match the stored {crc_stored:#010x}"
        ));
    }
    // SAFETY: `Component::deserialize` trusts its input to be `precompile_component`'s output.
    // The CRC shows these bytes are what a Stele process wrote with this trailer, and the cache
    // directory is the user's own (see the module doc); wasmtime checks the engine match.
    unsafe { Component::deserialize(engine, body) }.map_err(|e| format!("{e:#}"))
}

/// Writes `compiled` and its trailer to `file`, atomically.
fn store(dir: &Path, file: &Path, compiled: &[u8]) -> std::io::Result<()> {
    create_private_dir(dir)?;
    // Unique per write: processes that miss at once, and threads of one process calling
    // `load_or_compile` at once, each write a file of their own before the rename.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = file.with_extension(format!("tmp{}-{write}", std::process::id()));
    let written = (|| {
        let mut out = std::fs::File::create(&temp)?;
        out.write_all(compiled)?;
        out.write_all(&crc32c::crc32c(compiled).to_le_bytes())?;
        out.write_all(TRAILER_MAGIC)?;
        std::fs::rename(&temp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component small enough to compile in milliseconds, with one export to call.
    const TINY: &str = r#"(component
        (core module $m (func (export "answer") (result i32) i32.const 42))
        (core instance $i (instantiate $m))
        (func (export "answer") (result u32) (canon lift (core func $i "answer"))))"#;

    fn answer(engine: &Engine, component: &Component) -> u32 {
        let mut store = wasmtime::Store::new(engine, ());
        let linker = wasmtime::component::Linker::<()>::new(engine);
        let instance = linker.instantiate(&mut store, component).unwrap();
        let func = instance
            .get_typed_func::<(), (u32,)>(&mut store, "answer")
            .unwrap();
        func.call(&mut store, ()).unwrap().0
    }

    #[test]
    fn a_second_load_is_a_hit_and_runs() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("nested").join("cache");
        let engine = Engine::default();
        let wasm = wat::parse_str(TINY).unwrap();

        let (first, outcome) = load_or_compile(&engine, "tiny", &wasm, Some(&cache)).unwrap();
        assert_eq!(outcome, CacheOutcome::Compiled { stored: true });
        assert_eq!(answer(&engine, &first), 42);
        let file = file_for(&cache, &engine, "tiny", &wasm);
        assert!(file.is_file(), "{}", file.display());

        let (second, outcome) = load_or_compile(&engine, "tiny", &wasm, Some(&cache)).unwrap();
        assert_eq!(outcome, CacheOutcome::Hit);
        assert_eq!(answer(&engine, &second), 42);
        let leftovers: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
        assert_eq!(
            leftovers.len(),
            1,
            "no temporary file is left: {leftovers:?}"
        );
    }

    #[test]
    fn a_damaged_or_foreign_file_is_recompiled_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let wasm = wat::parse_str(TINY).unwrap();
        let file = file_for(dir.path(), &engine, "tiny", &wasm);
        load_or_compile(&engine, "tiny", &wasm, Some(dir.path())).unwrap();
        let good = std::fs::read(&file).unwrap();

        // One flipped bit in the machine code: the CRC catches it before wasmtime sees it.
        let mut flipped = good.clone();
        flipped[good.len() / 2] ^= 0x10;
        std::fs::write(&file, &flipped).unwrap();
        let (component, outcome) =
            load_or_compile(&engine, "tiny", &wasm, Some(dir.path())).unwrap();
        assert!(
            matches!(&outcome, CacheOutcome::Replaced { reason, stored: true } if reason.contains("checksum")),
            "{outcome:?}"
        );
        assert_eq!(answer(&engine, &component), 42);
        assert_eq!(std::fs::read(&file).unwrap(), good, "rewritten whole");

        // Torn to a few bytes, and a file that is not a cache file at all.
        for junk in [&good[..3], &b"not a compiled component"[..]] {
            std::fs::write(&file, junk).unwrap();
            let (_, outcome) = load_or_compile(&engine, "tiny", &wasm, Some(dir.path())).unwrap();
            assert!(
                matches!(outcome, CacheOutcome::Replaced { .. }),
                "{outcome:?}"
            );
        }

        // Whole, with a good CRC, but compiled by an engine configured otherwise: wasmtime's
        // header check refuses it, and the component is compiled again.
        let mut other_config = wasmtime::Config::new();
        other_config.epoch_interruption(true);
        let other = Engine::new(&other_config).unwrap();
        let foreign = other.precompile_component(&wasm).unwrap();
        store(dir.path(), &file, &foreign).unwrap();
        let (component, outcome) =
            load_or_compile(&engine, "tiny", &wasm, Some(dir.path())).unwrap();
        assert!(
            matches!(&outcome, CacheOutcome::Replaced { stored: true, .. }),
            "{outcome:?}"
        );
        assert_eq!(answer(&engine, &component), 42);
        assert_ne!(
            file_for(dir.path(), &other, "tiny", &wasm),
            file,
            "another engine's code has a name of its own"
        );
    }

    #[test]
    fn a_cache_that_cannot_be_written_still_compiles() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the directory should be: neither read nor write can succeed.
        let blocked = dir.path().join("a-file");
        std::fs::write(&blocked, b"x").unwrap();
        let engine = Engine::default();
        let wasm = wat::parse_str(TINY).unwrap();
        let (component, outcome) = load_or_compile(&engine, "tiny", &wasm, Some(&blocked)).unwrap();
        assert!(
            matches!(
                outcome,
                CacheOutcome::Replaced { stored: false, .. }
                    | CacheOutcome::Compiled { stored: false }
            ),
            "{outcome:?}"
        );
        assert_eq!(answer(&engine, &component), 42);
        let (_, outcome) = load_or_compile(&engine, "tiny", &wasm, None).unwrap();
        assert_eq!(outcome, CacheOutcome::Uncached);
    }
}
