//! Links between the docs: every relative link names a file that exists and, with a `#part`, a
//! heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces as `-`).

use std::collections::BTreeSet;
use std::path::Path;

/// The anchors of a markdown file's headings (outside fenced blocks), as GitHub makes them.
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// The targets of the markdown links `[text](target)` outside fenced blocks and code spans.
fn targets(markdown: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (i, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans hold example text, not links.
        let text: String = line
            .split('`')
            .enumerate()
            .filter(|(k, _)| k % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((i + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// Every broken relative link of `file` (a path under `root`).
pub fn broken(root: &Path, file: &str) -> Vec<String> {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let mut problems = Vec::new();
    for (line, target) in targets(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file_part, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        let linked = if file_part.is_empty() {
            path.clone()
        } else {
            dir.join(file_part)
        };
        if !linked.exists() {
            problems.push(format!("{file}:{line}: no file {target}"));
            continue;
        }
        if let Some(anchor) = anchor {
            let Ok(linked_text) = std::fs::read_to_string(&linked) else {
                continue;
            };
            if !anchors(&linked_text).contains(anchor) {
                problems.push(format!(
                    "{file}:{line}: no heading for #{anchor} in {target}"
                ));
            }
        }
    }
    problems
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let md = "# `redlock exec`: run a command\n## Time limits (`--max-runtime`, `--warn-after`)\n## Time limits (`--max-runtime`, `--warn-after`)\n```sh\n# not a heading\n```\n";
    let got: Vec<String> = anchors(md).into_iter().collect();
    assert_eq!(
        got,
        [
            "redlock-exec-run-a-command",
            "time-limits---max-runtime---warn-after",
            "time-limits---max-runtime---warn-after-1",
        ]
    );
}
