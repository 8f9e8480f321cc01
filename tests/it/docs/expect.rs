//! Whether a command's output is what the docs show: `[..]` stands for any text within a line,
//! a line `...` for any number of lines. Trailing blanks and trailing empty lines do not count.

pub fn matches(expected: &[String], actual: &str) -> bool {
    let expected = trimmed(expected.iter().map(String::as_str));
    let actual = trimmed(actual.lines());
    lines_match(&expected, &actual)
}

fn trimmed<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut lines: Vec<&str> = lines.map(str::trim_end).collect();
    while lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

fn lines_match(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((&"...", rest)) => (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..])),
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && lines_match(rest, more)),
    }
}

fn line_matches(pattern: &str, line: &str) -> bool {
    let mut pieces = pattern.split("[..]");
    let first = pieces.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[test]
fn wildcards_match_what_they_say() {
    let v = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(matches(&v(&["a [..] b"]), "a xyz b\n"));
    assert!(matches(&v(&["a [..] b"]), "a  b"));
    assert!(!matches(&v(&["a [..] b"]), "a x c"));
    assert!(matches(&v(&["[..]"]), "anything"));
    assert!(matches(&v(&["x[..]y[..]z"]), "x1y2y3z"));
    assert!(!matches(&v(&["x[..]y[..]z"]), "x1z2y"));
    assert!(matches(
        &v(&["one", "...", "four"]),
        "one\ntwo\nthree\nfour\n"
    ));
    assert!(matches(&v(&["one", "...", "two"]), "one\ntwo\n"));
    assert!(matches(&v(&["..."]), ""));
    assert!(!matches(&v(&["one"]), "one\ntwo"));
    assert!(!matches(&v(&["one", "two"]), "one"));
    assert!(matches(&v(&["one  ", ""]), "one\n\n"));
}
