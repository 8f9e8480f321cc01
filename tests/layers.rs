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

/// The crate modules `code` refers to (`crate::x`, `crate::{x, y}`), comments left out.
fn uses(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or_default();
                found.extend(
                    inner
                        .split(',')
                        .map(|m| m.trim().split("::").next().unwrap_or_default().to_string()),
                );
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                found.push(name);
            }
        }
    }
    found.retain(|m| !m.is_empty() && m != "eline");
    found
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
    let mut files: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    for file in files {
        let module = file.file_stem().unwrap().to_str().unwrap().to_string();
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
                "{module}: its module doc does not say 'Layer {mine}'"
            ));
        }
        for used in uses(&code) {
            match layers.get(&used) {
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
    let code = "use crate::lock::{Keys, Lock};\nuse crate::{cli, error};\n// crate::exec\n\
                let x = crate::store::open(); crate::eline!(\"\");";
    assert_eq!(uses(code), ["lock", "cli", "error", "store"]);
}
