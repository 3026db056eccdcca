//! Interop: pyarrow, an Arrow implementation nobody here wrote, reads what Stele writes.
//!
//! - Every frame body of a push log, as an Arrow IPC **stream**, with the reader that
//!   docs/FORMAT.md section 5 prints (taken from the document itself, so the documented reader
//!   is the tested one): before and after compaction, with logs written in every mode.
//! - The sealed section's payload, as an Arrow IPC **file**.
//!
//! pyarrow and crc32c are installed with pip into `target/pyarrow-site` on first use (about
//! 10 s; PyPI is one of this project's registries). Without `python3` the test says loudly
//! that it skipped; a failing install fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use stele::push_log::refs;
use stele_host::{Mode, PushLog};
use stele_tests::TempRoot;

/// Pinned, so that a new release cannot turn CI red overnight.
const PIP_PACKAGES: [&str; 2] = ["pyarrow==26.0.1", "crc32c==2.9.post0"];

fn workspace_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// `python3` with pyarrow importable through the returned `PYTHONPATH`, or `None` (after a
/// loud message) where there is no python3.
fn python_with_pyarrow() -> Option<PathBuf> {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!(
            "\n*** SKIPPED: the pyarrow interop test needs python3 on PATH, and this machine \
             has none. Nothing was checked against pyarrow. ***\n"
        );
        return None;
    }
    let site = workspace_target().join("pyarrow-site");
    let installed = site.join(".stele-installed");
    let wanted = PIP_PACKAGES.join(" ");
    if std::fs::read_to_string(&installed).ok().as_deref() != Some(wanted.as_str()) {
        // Installed beside, then renamed into place: a half-finished install is never used.
        let staging = workspace_target().join(format!("pyarrow-site.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "--target",
            ])
            .arg(&staging)
            .args(PIP_PACKAGES)
            .output()
            .expect("run pip");
        assert!(
            out.status.success(),
            "pip install {wanted} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(staging.join(".stele-installed"), &wanted).unwrap();
        let _ = std::fs::remove_dir_all(&site);
        std::fs::rename(&staging, &site).unwrap();
    }
    Some(site)
}

/// The reader printed in docs/FORMAT.md section 5, verbatim.
fn documented_reader() -> String {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/FORMAT.md"))
            .unwrap();
    let section = &doc[doc
        .find("### Reading a push log without Stele")
        .expect("FORMAT.md keeps its pyarrow reader")..];
    let start = section.find("```python\n").unwrap() + "```python\n".len();
    let len = section[start..].find("```").unwrap();
    section[start..start + len].to_owned()
}

/// What the Python side prints: one line per batch, rows as `a|b|c|d` joined with `;`, with
/// Python's `None` for a null.
const PRINT_BATCHES: &str = r#"
import sys

def show(kind, batches):
    for b in batches:
        print(kind, ";".join("|".join(str(v) for v in row.values()) for row in b.to_pylist()))

for arg in sys.argv[1:]:
    kind, path = arg.split("=", 1)
    if kind == "file":
        r = pa.ipc.open_file(path)
        print("schema", ",".join(f"{f.name}:{f.type}:{f.nullable}" for f in r.schema))
        show("file", [r.get_batch(i) for i in range(r.num_record_batches)])
    else:
        show(kind, read_push_log(path))
"#;

fn run_python(site: &Path, args: &[String]) -> String {
    let script = format!("{}\n{PRINT_BATCHES}", documented_reader());
    let out = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .args(args)
        .env("PYTHONPATH", site)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn push(seq: u64) -> RecordBatch {
    let names: Vec<String> = (0..3).map(|i| format!("refs/heads/b{i}")).collect();
    let targets: Vec<Option<String>> = (0..3)
        .map(|i| (i != 1 || seq.is_multiple_of(2)).then(|| format!("{seq:040x}")))
        .collect();
    RecordBatch::try_new(
        refs::schema(),
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(targets)),
            Arc::new(UInt64Array::from(vec![seq; 3])),
            Arc::new(Int64Array::from(vec![1_700_000_000_000 + seq as i64; 3])),
        ],
    )
    .unwrap()
}

/// The line Python prints for `batch`, built from Rust's side.
fn expected_line(kind: &str, batch: &RecordBatch) -> String {
    let col = |i: usize| batch.column(i);
    let names = col(0).as_any().downcast_ref::<StringArray>().unwrap();
    let targets = col(1).as_any().downcast_ref::<StringArray>().unwrap();
    let seqs = col(2).as_any().downcast_ref::<UInt64Array>().unwrap();
    let times = col(3).as_any().downcast_ref::<Int64Array>().unwrap();
    let rows: Vec<String> = (0..batch.num_rows())
        .map(|r| {
            let target = if targets.is_null(r) {
                "None".to_owned()
            } else {
                targets.value(r).to_owned()
            };
            format!(
                "{}|{target}|{}|{}",
                names.value(r),
                seqs.value(r),
                times.value(r)
            )
        })
        .collect();
    format!("{kind} {}", rows.join(";"))
}

#[test]
fn pyarrow_reads_frame_bodies_as_streams_and_the_sealed_section_as_a_file() {
    let Some(site) = python_with_pyarrow() else {
        return;
    };
    let root = TempRoot::new();
    let pushes: Vec<RecordBatch> = (1..=4).map(push).collect();
    let mut args = Vec::new();
    let mut expected = Vec::new();
    for mode in Mode::ALL {
        let name = format!("{}.log", mode.name());
        let log = PushLog::new(root.vfs(), &name, refs::schema(), mode).unwrap();
        for p in &pushes {
            log.append(p).unwrap();
        }
        args.push(format!("{}={}", mode.name(), root.path(&name).display()));
        expected.extend(pushes.iter().map(|p| expected_line(mode.name(), p)));
    }

    // Compacted: one frame holding every row, in push order.
    let compacted =
        PushLog::new(root.vfs(), "compacted.log", refs::schema(), Mode::Sandboxed).unwrap();
    for p in &pushes {
        compacted.append(p).unwrap();
    }
    assert_eq!(compacted.compact().unwrap().frames_after, 1);
    args.push(format!(
        "compacted={}",
        root.path("compacted.log").display()
    ));
    let all_rows = arrow_select::concat::concat_batches(&refs::schema(), &pushes).unwrap();
    expected.push(expected_line("compacted", &all_rows));

    // Sealed from the compacted log: split back into one batch per push.
    let section = compacted.seal_section("plugin").unwrap();
    std::fs::write(root.path("section.arrow"), &section.payload).unwrap();
    args.push(format!("file={}", root.path("section.arrow").display()));
    expected.push(
        "schema ref_name:string:False,target:string:True,push_seq:uint64:False,updated_ms:int64:False"
            .to_owned(),
    );
    expected.extend(pushes.iter().map(|p| expected_line("file", p)));

    let printed = run_python(&site, &args);
    let printed: Vec<&str> = printed.lines().collect();
    assert_eq!(printed, expected);
}
