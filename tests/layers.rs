//! The layer order written at the top of `src/lib.rs` is the one the code follows: every
//! `crate::MODULE` a file of `src/` mentions outside comments names a module of a lower layer.
//! A new module must be listed there, so the list stays complete, and each module's doc says its
//! layer ("Layer N"), so that the docs stay true when a module moves.

use std::collections::BTreeMap;
use std::path::Path;

/// Layer of each module, read from the numbered list under "# Layers" in lib.rs.
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let mut layers = BTreeMap::new();
    let list = lib
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .skip_while(|l| l.trim() != "# Layers");
    for line in list {
        let Some((n, rest)) = line.trim().split_once(". ") else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        let names = rest.split(':').next().unwrap_or_default();
        for name in names.split(',') {
            let name = name.trim().trim_matches('`');
            assert!(!name.is_empty(), "empty module name in lib.rs layer {n}");
            layers.insert(name.to_string(), n);
        }
    }
    layers
}

/// `code` without its comments and the contents of its string literals (a `crate::x` in a
/// message or a doc is not an import), newlines kept.
fn code_only(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            // A raw string: r"..." or r#"..."# (any number of #).
            'r' if matches!(chars.peek(), Some('"' | '#')) => {
                let mut hashes = 0;
                while chars.peek() == Some(&'#') {
                    chars.next();
                    hashes += 1;
                }
                if chars.next() != Some('"') {
                    continue;
                }
                let mut run = None;
                for c in chars.by_ref() {
                    run = match (c, run) {
                        ('"', _) if hashes == 0 => break,
                        ('"', _) => Some(0),
                        ('#', Some(n)) if n + 1 == hashes => break,
                        ('#', Some(n)) => Some(n + 1),
                        _ => None,
                    };
                }
                out.push_str("\"\"");
            }
            // A char literal ('"', '\\'', '\\u{..}'), not a lifetime.
            '\'' => {
                let mut ahead = chars.clone();
                match (ahead.next(), ahead.next()) {
                    (Some('\\'), _) => {
                        chars.next();
                        chars.next();
                        for c in chars.by_ref() {
                            if c == '\'' {
                                break;
                            }
                        }
                    }
                    (Some(_), Some('\'')) => {
                        chars.next();
                        chars.next();
                    }
                    _ => out.push(c),
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match c {
                        '\\' if !escaped => escaped = true,
                        '"' if !escaped => break,
                        _ => escaped = false,
                    }
                }
                out.push_str("\"\"");
            }
            c => out.push(c),
        }
    }
    out
}

/// The crate modules `code` refers to (`crate::x`, `crate::x::y`, `crate::{x, y::{Z, W}}` over
/// several lines), comments and strings left out.
fn uses(code: &str) -> Vec<String> {
    let code = code_only(code);
    let mut found = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let Some(group) = rest.strip_prefix('{') else {
            found.push(name(rest));
            continue;
        };
        // The group's top-level items: split at commas outside nested braces.
        let mut depth = 0;
        let mut item = String::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => found.push(name(&std::mem::take(&mut item))),
                c if depth == 0 => item.push(c),
                _ => {}
            }
        }
        found.push(name(&item));
    }
    found.retain(|m| !m.is_empty());
    found
}

/// Every `.rs` file of `src/` with the module it belongs to: `src/NAME.rs` and every file under
/// `src/NAME/` are module NAME (a module split into files is still one room of the list).
fn source_files(src: &Path) -> Vec<(String, std::path::PathBuf)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let module = path.file_name().unwrap().to_str().unwrap().to_string();
            let mut stack = vec![path];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if path.extension().is_some_and(|e| e == "rs") {
                        files.push((module.clone(), path));
                    }
                }
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = path.file_stem().unwrap().to_str().unwrap().to_string();
            files.push((module, path));
        }
    }
    files.sort();
    files
}

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = layers(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(
        layers.len() > 10,
        "no layer list found in src/lib.rs: {layers:?}"
    );
    let mut wrong = Vec::new();
    for (module, file) in source_files(&src) {
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(&mine) = layers.get(&module) else {
            wrong.push(format!("{module}: not in the layer list of src/lib.rs"));
            continue;
        };
        let code = std::fs::read_to_string(&file).unwrap();
        let doc: String = code
            .lines()
            .map_while(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join(" ");
        if !doc.contains(&format!("Layer {mine}")) {
            wrong.push(format!(
                "{}: its module doc does not say 'Layer {mine}'",
                file.display()
            ));
        }
        for used in uses(&code) {
            match layers.get(&used) {
                _ if used == module => {}
                Some(&theirs) if theirs < mine => {}
                Some(&theirs) => wrong.push(format!(
                    "{module} (layer {mine}) uses {used} (layer {theirs})"
                )),
                None => wrong.push(format!("{module} uses {used}, which is not in the list")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_both_forms_of_import() {
    let code = "use crate::lock::{Keys, Lock};\nuse crate::{\n    cli,\n    error::{Kind, failure},\n};\n\
                // crate::exec\n/* crate::exec */ let u = \"redis://h\"; crate::wait::x();\n\
                let m = \"crate::exec\\\" crate::exec\"; let r = r#\"crate::exec\"#;\n\
                let q = '\"'; let e = '\\''; crate::acquire::x(); fn f<'a>(_: &'a str) {}\n\
                let x = crate::store::open();";
    assert_eq!(
        uses(code),
        ["lock", "cli", "error", "wait", "acquire", "store"]
    );
}
