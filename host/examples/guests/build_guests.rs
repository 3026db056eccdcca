//! Builds the example guests in other languages (`host/examples/guests/`) and composes each with
//! the engine, in a Stele checkout: what `host/cli/tests/foreign_guests.rs` runs and
//! `stele bench --workloads guests` measures. Both include this file (`#[path]`), so there is
//! one build.
//!
//! Every step is cached under `target/guests/`, so a second run rebuilds nothing:
//! - **the tools**, at the versions the examples pin: `componentize-py` from
//!   `python/requirements.txt`, installed with pip into a virtual environment
//!   (`tools/python`); `componentize-js` (which brings `jco`) from `javascript/package.json`,
//!   installed by `npm ci` from the committed `package-lock.json` (`tools/javascript`). A
//!   stamp beside each records what was installed; a changed pin installs again.
//! - **the guest** (`<language>/guest.wasm`), from `wit/` (the example's world, Stele's WIT as
//!   `deps/stele/`) and the sources: rebuilt when a hash of the tool's stamp, the sources and
//!   the WIT changes (written to `guest.key` once the build succeeded).
//! - **the compositions**, as `wac plug` makes them (`stele-compose`, which the checkout's
//!   build of `stele-components` made in `target/guest/debug`): `events-<language>.wasm`, the
//!   guest with `stele.wasm` plugged into its `stele:log/wal` import (it imports
//!   `stele:log/vfs`, which a Stele host serves), and `events-<language>-wasi.wasm`, with
//!   `stele-wasi.wasm` instead (its only storage is `wasi:filesystem`), each keyed by the
//!   guest's, the engine's and the composer's bytes.
//!
//! Nothing is skipped: a missing `python3` (with `venv`), `node` or `npm` is an error that says
//! which. Files are written under a temporary name and renamed, so a reader never sees half a
//! component; in one process builds take turns, and two processes building at once each build
//! and the later rename wins (the tools' install is not shared that way: run one build at a
//! time after changing a pin). Nothing is written outside `target/guests/`.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A guest language, with where its example lives and how it is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// `host/examples/guests/python`, built with componentize-py.
    Python,
    /// `host/examples/guests/javascript`, built with componentize-js.
    JavaScript,
}

impl Language {
    /// Both, in the order tables list them.
    pub const ALL: [Language; 2] = [Language::Python, Language::JavaScript];

    /// The example's folder name under `host/examples/guests/`, and the name in file names.
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
        }
    }

    /// The example's sources: what its build reads besides the WIT.
    fn sources(self) -> &'static [&'static str] {
        match self {
            Language::Python => &["app.py", "requirements.txt"],
            Language::JavaScript => &["app.js", "package.json", "package-lock.json"],
        }
    }
}

/// What [`build`] made for one language.
#[derive(Clone, Debug)]
pub struct Built {
    /// The guest alone, as its language's tool made it (imports `stele:log/wal`).
    pub guest: PathBuf,
    /// The guest composed with `stele.wasm`: imports `stele:log/vfs` and WASI.
    pub with_engine: PathBuf,
    /// The guest composed with `stele-wasi.wasm`: imports WASI only.
    pub with_wasi: PathBuf,
    /// Seconds the language's tool took to build the guest, when this call built it.
    pub build_seconds: Option<f64>,
}

/// Builds (or finds cached) `language`'s guest and its two compositions. `engine` and `wasi`
/// are the bytes of `stele.wasm` and `stele-wasi.wasm` to plug in.
pub fn build(
    workspace: &Path,
    language: Language,
    engine: &[u8],
    wasi: &[u8],
) -> Result<Built, String> {
    // One build at a time in a process: both languages share `target/guests/wit` (a test
    // process builds them from two threads).
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = workspace.join("target").join("guests");
    let example = workspace.join("host/examples/guests").join(language.name());
    let wit = assemble_wit(workspace, &out)?;
    let stamp = install_tools(&out, &example, language)?;

    let dir = out.join(language.name());
    mkdir(&dir)?;
    let guest = dir.join("guest.wasm");
    let mut key = Key::new();
    key.add(stamp.as_bytes());
    for source in language.sources() {
        key.add_file(&example.join(source))?;
    }
    for entry in sorted_files(&wit)?
        .into_iter()
        .chain(sorted_files(&wit.join("deps/stele"))?)
    {
        key.add_file(&entry)?;
    }
    let build_seconds = if key.matches(&guest)? {
        None
    } else {
        let started = Instant::now();
        let building = dir.join(format!("guest.{}.building.wasm", unique()));
        let mut cmd = match language {
            Language::Python => {
                // The sources are copied out first: importing them (componentize-py does, to
                // snapshot the initialized interpreter) would write `__pycache__` beside them.
                let sources = dir.join("src");
                mkdir(&sources)?;
                copy_if_changed(&example.join("app.py"), &sources.join("app.py"))?;
                let mut cmd = Command::new(out.join("tools/python/bin/componentize-py"));
                cmd.env("PYTHONDONTWRITEBYTECODE", "1")
                    .arg("-d")
                    .arg(&wit)
                    .args(["-w", "events-guest", "componentize", "-p"])
                    .arg(&sources)
                    .args(["app", "-o"])
                    .arg(&building);
                cmd
            }
            Language::JavaScript => {
                let mut cmd =
                    Command::new(out.join("tools/javascript/node_modules/.bin/componentize-js"));
                // No `wasi:http` (StarlingMonkey's `fetch`, and its incoming-handler export): the
                // guest keeps a log, and a host that links no HTTP could not instantiate it.
                cmd.args(["--disable", "http", "--disable", "fetch-event", "--wit"])
                    .arg(&wit)
                    .args(["--world-name", "events-guest", "--out"])
                    .arg(&building)
                    .arg(example.join("app.js"));
                cmd
            }
        };
        run(&mut cmd)?;
        rename(&building, &guest)?;
        key.write(&guest)?;
        Some(started.elapsed().as_secs_f64())
    };

    let composer = workspace
        .join("target/guest/debug")
        .join(format!("stele-compose{}", std::env::consts::EXE_SUFFIX));
    if !composer.is_file() {
        return Err(format!(
            "{} is missing: the checkout's build of stele-components makes it (cargo build)",
            composer.display()
        ));
    }
    let guest_bytes = read(&guest)?;
    let composer_bytes = read(&composer)?;
    let mut composed = Vec::new();
    for (suffix, plug_name, plug) in [("", "stele", engine), ("-wasi", "stele-wasi", wasi)] {
        let target = out.join(format!("events-{}{suffix}.wasm", language.name()));
        let mut key = Key::new();
        key.add(&guest_bytes);
        key.add(plug);
        key.add(&composer_bytes);
        if !key.matches(&target)? {
            // The plug's file name is the package name `wac plug` gives it (`plug:<stem>`).
            let plug_dir = out.join(format!("plug.{}", unique()));
            mkdir(&plug_dir)?;
            let plug_path = plug_dir.join(format!("{plug_name}.wasm"));
            write(&plug_path, plug)?;
            let building = target.with_extension(format!("{}.building.wasm", unique()));
            let result = run(Command::new(&composer)
                .arg(&guest)
                .arg(&plug_path)
                .arg(&building));
            let _ = std::fs::remove_dir_all(&plug_dir);
            result?;
            rename(&building, &target)?;
            key.write(&target)?;
        }
        composed.push(target);
    }
    let with_wasi = composed.pop().expect("two compositions");
    let with_engine = composed.pop().expect("two compositions");
    Ok(Built {
        guest,
        with_engine,
        with_wasi,
        build_seconds,
    })
}

/// `target/guests/wit`: the examples' world and Stele's WIT as its dependency, the layout
/// both tools read (`wit/world.wit`, `wit/deps/stele/*.wit`).
fn assemble_wit(workspace: &Path, out: &Path) -> Result<PathBuf, String> {
    let wit = out.join("wit");
    let deps = wit.join("deps/stele");
    mkdir(&deps)?;
    copy_if_changed(
        &workspace.join("host/examples/guests/wit/world.wit"),
        &wit.join("world.wit"),
    )?;
    for file in sorted_files(&workspace.join("wit"))? {
        let name = file.file_name().expect("a file has a name");
        copy_if_changed(&file, &deps.join(name))?;
    }
    Ok(wit)
}

/// Installs `language`'s tool under `out/tools/<language>` unless the stamp there says it is
/// already the pinned one; returns the stamp (what was installed).
fn install_tools(out: &Path, example: &Path, language: Language) -> Result<String, String> {
    let tools = out.join("tools").join(language.name());
    let stamp_path = tools.join("installed.stamp");
    let pins = match language {
        Language::Python => read(&example.join("requirements.txt"))?,
        Language::JavaScript => read(&example.join("package-lock.json"))?,
    };
    let stamp = format!("{:016x}", Key::of(&pins));
    if std::fs::read_to_string(&stamp_path).is_ok_and(|found| found == stamp) {
        return Ok(stamp);
    }
    let _ = std::fs::remove_dir_all(&tools);
    mkdir(&tools)?;
    match language {
        Language::Python => {
            run(Command::new("python3").args(["-m", "venv"]).arg(&tools))
                .map_err(|e| format!("the Python guest needs python3 with its venv module: {e}"))?;
            run(Command::new(tools.join("bin/pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-input",
                    "-r",
                ])
                .arg(example.join("requirements.txt")))?;
        }
        Language::JavaScript => {
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(example.join(file), tools.join(file))
                    .map_err(|e| format!("copy {file}: {e}"))?;
            }
            run(Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--prefix"])
                .arg(&tools))
            .map_err(|e| format!("the JavaScript guest needs node and npm: {e}"))?;
        }
    }
    write(&stamp_path, stamp.as_bytes())?;
    Ok(stamp)
}

/// A hash of what a cached file was made from, kept in `<file>.key` beside it. Not
/// cryptographic: it tells a stale build from a current one in the checkout's own `target/`.
struct Key(DefaultHasher);

impl Key {
    fn new() -> Key {
        Key(DefaultHasher::new())
    }

    fn of(bytes: &[u8]) -> u64 {
        let mut key = Key::new();
        key.add(bytes);
        key.0.finish()
    }

    fn add(&mut self, bytes: &[u8]) {
        self.0.write_usize(bytes.len());
        self.0.write(bytes);
    }

    fn add_file(&mut self, path: &Path) -> Result<(), String> {
        self.add(path.file_name().unwrap_or_default().as_encoded_bytes());
        self.add(&read(path)?);
        Ok(())
    }

    fn hex(&self) -> String {
        format!("{:016x}", self.0.finish())
    }

    fn path(file: &Path) -> PathBuf {
        let mut name = file.as_os_str().to_owned();
        name.push(".key");
        PathBuf::from(name)
    }

    /// Whether `file` exists and was made from what this key hashed.
    fn matches(&self, file: &Path) -> Result<bool, String> {
        Ok(file.is_file()
            && std::fs::read_to_string(Key::path(file)).is_ok_and(|found| found == self.hex()))
    }

    fn write(&self, file: &Path) -> Result<(), String> {
        write(&Key::path(file), self.hex().as_bytes())
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn sorted_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("read {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wit"))
        .collect();
    files.sort();
    Ok(files)
}

fn copy_if_changed(from: &Path, to: &Path) -> Result<(), String> {
    let bytes = read(from)?;
    if std::fs::read(to).is_ok_and(|found| found == bytes) {
        return Ok(());
    }
    write(to, &bytes)
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))
}

/// Writes `bytes` under a temporary name and renames it over `path`.
fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", unique()));
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, bytes).map_err(|e| format!("write {}: {e}", temporary.display()))?;
    rename(&temporary, path)
}

/// A name no other writer in this process or another uses at the same time: the process id
/// and a count.
fn unique() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

fn rename(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::rename(from, to)
        .map_err(|e| format!("rename {} to {}: {e}", from.display(), to.display()))
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))
}
