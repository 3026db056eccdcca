//! `stele push-log scan|compact|seal|unseal` on a real log: the sealed module still parses,
//! carries the section, and unsealing gives back one batch per push.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use stele::push_log::{PushLog, refs};
use stele_host::fs::RealFs;

mod common;

fn stele(args: &[&str]) -> (bool, String) {
    common::stele_in(None, args)
}

#[test]
fn scan_compact_seal_and_unseal() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let log = PushLog::new(fs, "refs.log", refs::schema());
    for seq in 1..=3u64 {
        let batch = RecordBatch::try_new(
            refs::schema(),
            vec![
                Arc::new(StringArray::from(vec!["main", "dev"])),
                Arc::new(StringArray::from(vec![Some(format!("c{seq}")), None])),
                Arc::new(UInt64Array::from(vec![seq; 2])),
                Arc::new(Int64Array::from(vec![seq as i64; 2])),
            ],
        )
        .unwrap();
        log.append(&batch).unwrap();
    }
    drop(log);
    let path = dir.path().join("refs.log");
    let path = path.to_str().unwrap();

    for mode in ["native", "sandboxed-plain"] {
        let (ok, out) = stele(&["push-log", "scan", path, "--mode", mode]);
        assert!(ok, "{out}");
        assert!(out.contains("frames=3 end=Clean"), "{out}");
        assert!(out.contains("main -> c3 (push 3"), "{out}");
    }
    let (ok, out) = stele(&["push-log", "compact", path]);
    assert!(
        ok && out.contains("3 frames") && out.contains("compacted to 1"),
        "{out}"
    );

    let module = dir.path().join("plugin.wasm");
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let module = module.to_str().unwrap();
    let (ok, out) = stele(&[
        "push-log", "seal", path, "--module", "plugin", "--into", module,
    ]);
    assert!(ok, "{out}");
    let sealed = std::fs::read(module).unwrap();
    let names: Vec<String> = wasmparser::Parser::new(0)
        .parse_all(&sealed)
        .filter_map(|p| match p.unwrap() {
            wasmparser::Payload::CustomSection(r) => Some(r.name().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["stele.push-log.plugin"]);
    let (ok, out) = stele(&["push-log", "unseal", module]);
    assert!(ok, "{out}");
    assert!(
        out.contains("stele.push-log.plugin: 3 pushes, 6 rows"),
        "{out}"
    );

    let (ok, out) = stele(&[
        "push-log", "seal", path, "--module", "plugin", "--into", module,
    ]);
    assert!(!ok && out.contains("already holds a section"), "{out}");
    assert_eq!(out.lines().count(), 1, "one line: {out}");
}

#[test]
fn append_reads_csv_and_json_lines_and_refuses_rows_that_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let log = dir.path().join("refs.log");
    let log = log.to_str().unwrap();
    let csv = file(
        "first.csv",
        "ref_name,target,push_seq,updated_ms\nmain,c1,1,10\ndev,d1,1,10\n",
    );
    let (ok, out) = stele(&["push-log", "append", log, &csv, "--refs"]);
    assert!(ok && out.contains("pushed 2 rows at offset 32"), "{out}");
    let jsonl = file(
        "second.jsonl",
        concat!(
            r#"{"ref_name":"main","target":"c2","push_seq":2,"updated_ms":20}"#,
            "\n",
            r#"{"ref_name":"dev","target":null,"push_seq":2,"updated_ms":20}"#,
            "\n"
        ),
    );
    let (ok, out) = stele(&[
        "push-log",
        "append",
        log,
        &jsonl,
        "--mode",
        "sandboxed-plain",
    ]);
    assert!(ok && out.contains("pushed 2 rows"), "{out}");

    let before = std::fs::read(log).unwrap();
    for (name, text, why) in [
        (
            "swapped.csv",
            "target,ref_name,push_seq,updated_ms\nc3,main,3,30\n",
            "CSV header does not match schema",
        ),
        (
            "typo.jsonl",
            r#"{"ref_nam":"main","target":"c3","push_seq":3,"updated_ms":30}"#,
            "missing from schema",
        ),
        (
            "negative.csv",
            "ref_name,target,push_seq,updated_ms\nmain,c3,-3,30\n",
            "rows do not fit",
        ),
    ] {
        let (ok, out) = stele(&["push-log", "append", log, &file(name, text)]);
        assert!(!ok && out.contains(why) && out.contains(name), "{out}");
        assert_eq!(out.lines().count(), 1, "one line: {out}");
    }
    assert_eq!(std::fs::read(log).unwrap(), before, "nothing pushed");

    let (ok, out) = stele(&["push-log", "scan", log]);
    assert!(ok, "{out}");
    assert!(out.contains("frames=2 end=Clean"), "{out}");
    assert!(
        out.contains("refs: 1\n  main -> c2 (push 2, 20 ms)"),
        "{out}"
    );

    let split = dir.path().join("split.log");
    let numbers = file("numbers.csv", "a,b\n1,x\n2,y\n3,z\n");
    let (ok, out) = stele(&[
        "push-log",
        "append",
        split.to_str().unwrap(),
        &numbers,
        "--rows-per-push",
        "2",
    ]);
    assert!(ok, "{out}");
    assert_eq!(out.matches("pushed").count(), 2, "{out}");
    let schema = stele::push_log::PushLog::detect_schema(
        &RealFs::open_root(dir.path()).unwrap(),
        "split.log",
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        schema
            .fields()
            .iter()
            .map(|f| format!("{}:{}", f.name(), f.data_type()))
            .collect::<Vec<_>>(),
        ["a:Int64", "b:Utf8"],
        "inferred from the CSV"
    );
}
