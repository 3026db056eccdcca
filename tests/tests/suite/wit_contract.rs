//! The WIT package is a contract a stranger can implement from its text alone: every
//! interface, world, type, field, case and function in `wit/` carries a doc comment (`///`),
//! and every error variant a peer receives has the catch-all `other(string)` case, so that a
//! condition a later version adds can travel to an old peer without a new case
//! (`docs/FORMAT.md` §6).
//!
//! WIT's grammar is regular enough in these files for a line-based check: each declaration
//! sits on its own line, and its doc comment on the lines just above.

use std::path::Path;

/// The error variants that travel between the engine and its peers.
const ERROR_VARIANTS: [&str; 4] = ["vfs-error", "wal-error", "journal-error", "push-log-error"];

/// What a line declares, if anything: (kind, name).
fn declaration(line: &str, inside_type_body: bool) -> Option<(&'static str, String)> {
    let line = line.trim();
    if line.is_empty()
        || line.starts_with("//")
        || line.starts_with("package ")
        || line.starts_with("use ")
        || line.starts_with("import ")
        || line.starts_with("export ")
        || line.starts_with('}')
    {
        return None;
    }
    for kind in [
        "interface",
        "world",
        "record",
        "variant",
        "enum",
        "flags",
        "resource",
        "type",
    ] {
        if let Some(rest) = line.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-')
                .collect();
            return Some((kind, name));
        }
    }
    let name: String = line
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '-')
        .collect();
    if line.contains("func(") {
        return Some(("function", name));
    }
    inside_type_body.then_some(("field or case", name))
}

/// Every declaration in `text` without a doc comment just above it, as "file:line kind name".
fn undocumented(file: &str, text: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let mut previous = "";
    // Whether the innermost open block is a record, variant, enum or flags body, whose lines
    // are fields and cases.
    let mut blocks: Vec<bool> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        let inside_type_body = blocks.last().copied().unwrap_or(false);
        if let Some((kind, name)) = declaration(trimmed, inside_type_body)
            && !previous.starts_with("///")
        {
            missing.push(format!("{file}:{} {kind} {name}", number + 1));
        }
        if trimmed.ends_with('{') {
            let opens_type_body = ["record ", "variant ", "enum ", "flags "]
                .iter()
                .any(|kind| trimmed.starts_with(kind));
            blocks.push(opens_type_body);
        }
        if trimmed.starts_with('}') {
            blocks.pop();
        }
        if !trimmed.is_empty() {
            previous = trimmed;
        }
    }
    missing
}

/// The case names of variant `name` in `text`, if it is declared there.
fn cases_of(text: &str, name: &str) -> Option<Vec<String>> {
    let start = text.find(&format!("variant {name} {{"))?;
    let body = &text[start..];
    let body = &body[body.find('{')? + 1..body.find('}')?];
    Some(
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(|l| l.trim_end_matches(',').to_owned())
            .collect(),
    )
}

fn wit_files() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "wit"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    files
}

#[test]
fn every_declaration_in_the_wit_package_is_documented() {
    let missing: Vec<String> = wit_files()
        .iter()
        .flat_map(|(file, text)| undocumented(file, text))
        .collect();
    assert!(
        missing.is_empty(),
        "{} declarations without a doc comment:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_checker_finds_an_undocumented_case_field_and_function() {
    let text = "interface x {\n    /// Documented.\n    variant e {\n        /// Yes.\n        a,\n        b(string),\n    }\n    /// A record.\n    record r {\n        f: u64,\n    }\n    g: func();\n}\n";
    assert_eq!(
        undocumented("x.wit", text),
        [
            "x.wit:1 interface x",
            "x.wit:6 field or case b",
            "x.wit:10 field or case f",
            "x.wit:12 function g",
        ]
    );
}

#[test]
fn every_error_variant_has_the_catch_all_case() {
    let files = wit_files();
    for variant in ERROR_VARIANTS {
        let cases = files
            .iter()
            .find_map(|(_, text)| cases_of(text, variant))
            .unwrap_or_else(|| panic!("variant {variant} is declared in wit/"));
        assert!(
            cases.iter().any(|case| case == "other(string)"),
            "{variant} has no `other(string)` case: {cases:?}"
        );
    }
}
