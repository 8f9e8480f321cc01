//! Text that came from outside (a Redis key or field any client can write) made safe to print.
//!
//! Anyone who can write to the Redis server can plant a holder record or a lock key; whoever runs
//! `redlock status` (or meets the lock busy) would otherwise have it interpreted by their
//! terminal: escape sequences (OSC 52 writes the clipboard, CSI moves the cursor and rewrites
//! what was printed), `\r` (overwrites the line), and bidirectional overrides (U+202E shows
//! text in an order other than the one it has). Such characters are shown escaped, as `\u{1b}`,
//! so that they are visible rather than obeyed. Everything else, wide characters included, stays.
//!
//! Such text is bounded too: a planted 2 MB note must not fill a terminal, a log or a JSON
//! consumer. What enters from Redis is kept to [`KEPT_BYTES`] ([`field`]: what `--json` carries)
//! and shown to [`SHOWN_CHARS`] characters in tables, lines and messages ([`shown`]); a cut text
//! ends in `…`.//!
//! Layer 0 of the list in `lib.rs`.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as is: a control character (C0, DEL, C1), a
/// bidirectional formatting character, or an invisible one that makes a name look like another
/// (soft hyphen, zero-width space and non-joiner, word joiner and invisible operators, Hangul
/// and Mongolian fillers, byte-order mark, tag characters) or breaks a line where none shows
/// (line and paragraph separators). The zero-width joiner and the variation selectors stay:
/// emoji are built with them.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || is_bidi_control(c)
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{200b}'
                | '\u{200c}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{2060}'..='\u{2064}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// The characters that change the display order of text (Unicode's Bidi_Control property).
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Why `s` cannot name something redlock shows (a lock, a `--prefix`, a pool's place), or
/// `None` when it can: the first character that [`is_unsafe`] finds, said by kind and escaped
/// (`the invisible character \u{200b}`). One rule for every name: a name that `status` would
/// have to show escaped, or that looks like another, is refused where it is given.
pub fn unsafe_in_name(s: &str) -> Option<String> {
    let c = s.chars().find(|&c| is_unsafe(c))?;
    let kind = if c.is_control() {
        "control character"
    } else if is_bidi_control(c) {
        "invisible direction character"
    } else if matches!(c, '\u{2028}' | '\u{2029}') {
        "line or paragraph separator"
    } else {
        "invisible character"
    };
    Some(format!("the {kind} {}", c.escape_unicode()))
}

/// The most characters of one field (a note, a user, a host, a pid, who forced a release) that
/// a table, a line or a message shows; a longer one is cut, with `…` as its last character.
/// A note redlock writes is 200 characters at most.
pub const SHOWN_CHARS: usize = 200;

/// The most bytes of one field kept from Redis, and so carried by `--json`; a longer one is
/// cut at a character boundary, with `…` as its end.
pub const KEPT_BYTES: usize = 4096;

/// The ellipsis that ends a cut field.
const CUT: char = '…';

/// `s` cut to at most `max` characters (`max` ≥ 1), the last of them `…` when it was cut.
pub fn clip(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => Cow::Borrowed(s),
        Some(_) => {
            let end = s
                .char_indices()
                .nth(max.max(1) - 1)
                .map_or(s.len(), |(i, _)| i);
            Cow::Owned(format!("{}{CUT}", &s[..end]))
        }
    }
}

/// `s` as a table, a line or a message shows a field: at most [`SHOWN_CHARS`] characters.
pub fn shown(s: &str) -> Cow<'_, str> {
    clip(s, SHOWN_CHARS)
}

/// A field read from Redis as redlock keeps it: escaped ([`printable`]) and at most
/// [`KEPT_BYTES`] bytes, `…` included when it was cut.
pub fn field(s: &str) -> String {
    let head = &s[..floor_char_boundary(s, KEPT_BYTES)];
    let escaped = printable(head);
    if escaped.len() <= KEPT_BYTES && head.len() == s.len() {
        return escaped.into_owned();
    }
    let end = floor_char_boundary(&escaped, KEPT_BYTES - CUT.len_utf8());
    format!("{}{CUT}", &escaped[..end])
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    (0..=i).rev().find(|&j| s.is_char_boundary(j)).unwrap_or(0)
}

/// `s` with every unsafe character escaped (`\u{1b}`); borrowed when there is none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_shown_not_obeyed() {
        for (raw, shown) in [
            ("alice", "alice"),
            ("デプロイ", "デプロイ"),
            ("\u{1b}]52;c;cm0gLXJm\u{7}", "\\u{1b}]52;c;cm0gLXJm\\u{7}"),
            ("\u{1b}[2J\u{1b}[H", "\\u{1b}[2J\\u{1b}[H"),
            ("ok\rEVIL", "ok\\u{d}EVIL"),
            ("user\u{202e}gnp.exe", "user\\u{202e}gnp.exe"),
            ("\u{9b}31m", "\\u{9b}31m"),
            ("a\u{2066}b\u{2069}", "a\\u{2066}b\\u{2069}"),
            ("ad\u{200b}min", "ad\\u{200b}min"),
            ("\u{feff}root", "\\u{feff}root"),
            ("a\u{2028}b", "a\\u{2028}b"),
            ("👩\u{200d}💻", "👩\u{200d}💻"),
            ("ad\u{ad}min", "ad\\u{ad}min"),
            ("a\u{3164}", "a\\u{3164}"),
            ("x\u{e0041}", "x\\u{e0041}"),
            ("❤\u{fe0f}", "❤\u{fe0f}"),
        ] {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn fields_are_bounded_with_an_ellipsis() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "ab…");
        assert_eq!(clip("デプロイ", 3), "デプ…");
        assert!(matches!(clip("abc", 3), Cow::Borrowed(_)));
        let long = "x".repeat(2 << 20);
        assert_eq!(shown(&long).chars().count(), SHOWN_CHARS);
        assert!(shown(&long).ends_with('…'));
        assert_eq!(shown("short"), "short");
        for raw in [long.clone(), "é".repeat(5000), "\u{1b}".repeat(3000)] {
            let kept = field(&raw);
            assert!(kept.len() <= KEPT_BYTES, "{}", kept.len());
            assert!(kept.ends_with('…'), "{kept:?}");
            assert!(!kept.contains('\u{1b}'));
        }
        assert_eq!(field("ok\u{1b}"), "ok\\u{1b}");
        assert_eq!(field(&"y".repeat(KEPT_BYTES)), "y".repeat(KEPT_BYTES));
    }

    #[test]
    fn a_name_with_an_unsafe_character_is_refused_by_kind() {
        for (name, why) in [
            ("deploy", None),
            ("デプロイ-👩\u{200d}💻", None),
            ("a\tb", Some("the control character \\u{9}")),
            (
                "a\u{202e}b",
                Some("the invisible direction character \\u{202e}"),
            ),
            ("ad\u{200b}min", Some("the invisible character \\u{200b}")),
            (
                "a\u{2028}b",
                Some("the line or paragraph separator \\u{2028}"),
            ),
        ] {
            assert_eq!(unsafe_in_name(name).as_deref(), why, "{name:?}");
        }
    }
}
