//! Reading a markdown file into the examples it shows: fenced blocks, the commands of a console
//! session with their expected output, and every redlock invocation a block makes.

/// How a fenced block is checked, from its info string (see the module doc of `docs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// ```` ```console ````: commands run one by one, each output compared.
    Console,
    /// ```` ```sh ```` / ```` ```bash ````: one script, run whole, must exit 0.
    Script,
    /// ```` ```crontab ````: each entry's command run, must exit 0.
    Crontab,
    /// Any other language, or `parse-only`: each redlock invocation parsed, not run.
    ParseOnly,
    /// ```` ```text ````: never run; must not invoke redlock.
    Text,
}

#[derive(Debug)]
pub struct Block {
    pub kind: Kind,
    /// The info string as written, for messages.
    pub info: String,
    /// 1-based line of the first line inside the fence.
    pub line: usize,
    pub lines: Vec<String>,
}

impl Block {
    pub fn text(&self) -> String {
        let mut s = self.lines.join("\n");
        s.push('\n');
        s
    }
}

/// A command of a console block and what it must print.
#[derive(Debug)]
pub struct Command {
    pub line: usize,
    /// The command as bash reads it (continuation lines joined with their backslash-newline).
    pub text: String,
    pub status: i32,
    pub expected: Vec<String>,
}

/// The fenced blocks of a markdown file, and the problems that are not about one block: an
/// unterminated fence, a fence without a language, an indented command outside any fence.
pub fn blocks(markdown: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    let mut open: Option<(String, usize, Block)> = None;
    for (i, raw) in markdown.lines().enumerate() {
        let number = i + 1;
        let indent = raw.len() - raw.trim_start().len();
        let trimmed = raw.trim_start();
        match &mut open {
            Some((fence, fence_indent, block)) => {
                if trimmed.trim_end() == fence.as_str() {
                    let (_, _, block) = open.take().unwrap();
                    blocks.push(block);
                } else {
                    let cut = raw.len() - raw.trim_start().len();
                    block.lines.push(raw[cut.min(*fence_indent)..].to_string());
                }
            }
            None => {
                if let Some(fence) = fence_of(trimmed) {
                    let info = trimmed[fence.len()..].trim().to_string();
                    if info.is_empty() {
                        problems.push(format!(
                            "line {number}: a fence without a language (say console, sh, text...)"
                        ));
                    }
                    let block = Block {
                        kind: kind_of(&info),
                        info,
                        line: number + 1,
                        lines: Vec::new(),
                    };
                    open = Some((fence, indent, block));
                } else if indent >= 4 && (trimmed.starts_with("$ ") || invokes(trimmed)) {
                    problems.push(format!(
                        "line {number}: an indented command outside a fence (use ```console)"
                    ));
                }
            }
        }
    }
    if let Some((_, _, block)) = open {
        problems.push(format!("line {}: a fence never closed", block.line - 1));
    }
    (blocks, problems)
}

fn fence_of(line: &str) -> Option<String> {
    let ticks = line.chars().take_while(|&c| c == '`').count();
    (ticks >= 3).then(|| "`".repeat(ticks))
}

fn kind_of(info: &str) -> Kind {
    let mut words = info.split_whitespace();
    let lang = words.next().unwrap_or("");
    if words.any(|w| w == "parse-only") {
        return Kind::ParseOnly;
    }
    match lang {
        "console" => Kind::Console,
        "sh" | "bash" => Kind::Script,
        "crontab" => Kind::Crontab,
        "text" => Kind::Text,
        _ => Kind::ParseOnly,
    }
}

/// The commands of a console block. A line `? N` right after a command sets the status it must
/// exit with (0 otherwise).
pub fn commands(block: &Block) -> Result<Vec<Command>, String> {
    let mut commands: Vec<Command> = Vec::new();
    let mut lines = block.lines.iter().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let number = block.line + i;
        if let Some(first) = line.strip_prefix("$ ") {
            let mut text = first.to_string();
            while text.ends_with('\\') {
                let Some((_, next)) = lines.next() else {
                    return Err(format!("line {number}: a continued command never ends"));
                };
                text.push('\n');
                text.push_str(next);
            }
            let mut status = 0;
            if let Some((_, next)) = lines.peek()
                && let Some(code) = next.strip_prefix("? ")
            {
                status = code
                    .trim()
                    .parse()
                    .map_err(|_| format!("line {}: `? {code}` is not a status", number + 1))?;
                lines.next();
            }
            commands.push(Command {
                line: number,
                text,
                status,
                expected: Vec::new(),
            });
        } else if let Some(command) = commands.last_mut() {
            command.expected.push(line.clone());
        } else if !line.trim().is_empty() {
            return Err(format!(
                "line {number}: output before any `$ ` command in a console block"
            ));
        }
    }
    Ok(commands)
}

/// Whether a line runs redlock: the word `redlock` (or a path ending in `/redlock`) at a place a
/// command starts, followed by an argument or the end of the line.
pub fn invokes(line: &str) -> bool {
    !invocations(line).is_empty()
}

/// The arguments of each redlock invocation on a line (or a command spanning lines), as the shell
/// would split them, up to the end of that simple command. An argument that is only an
/// expansion (`$T`, `"$T"`, `$$`, `$(...)`, `${{ github.sha }}`) reads as `1`: a valid name, token,
/// pid, count and duration alike, so that the parser judges the flags around it.
pub fn invocations(text: &str) -> Vec<Vec<String>> {
    let words = split(text);
    let mut found: Vec<Vec<String>> = words
        .iter()
        .flat_map(|w| w.substitutions.iter().flat_map(|inner| invocations(inner)))
        .collect();
    let mut at_start = true;
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        if word.operator {
            at_start = true;
            i += 1;
            continue;
        }
        let is_redlock = word.text == "redlock" || word.text.ends_with("/redlock");
        if at_start && is_redlock && !word.quoted {
            let mut args = Vec::new();
            i += 1;
            while i < words.len() && !words[i].operator {
                args.push(if words[i].expansion {
                    "1".to_string()
                } else {
                    words[i].text.clone()
                });
                i += 1;
            }
            found.push(args);
            at_start = true;
            continue;
        }
        // An assignment (`T=$(...)`), a prefix command or a YAML/unit key keeps the start open.
        at_start = is_prefix(&word.text);
        i += 1;
    }
    found
}

fn is_prefix(word: &str) -> bool {
    let assignment = word
        .split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(name_char));
    assignment
        || word.ends_with(':')
        || word.starts_with('-') && word.len() == 1
        || matches!(
            word,
            "sudo" | "exec" | "time" | "nohup" | "env" | "then" | "do" | "else" | "!" | "{" | "sh"
        )
        || word.starts_with("ExecStart")
        || word.starts_with('@')
        || word
            .chars()
            .all(|c| c.is_ascii_digit() || "*/,-".contains(c))
}

/// A character of a shell variable's name.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[derive(Debug)]
struct Word {
    text: String,
    /// The whole word is one expansion.
    expansion: bool,
    /// The word began with a quote.
    quoted: bool,
    /// `;`, `|`, `||`, `&`, `&&`, `(`, `)`, a newline or a comment.
    operator: bool,
    /// The commands inside each `$(...)` of the word.
    substitutions: Vec<String>,
}

/// A shell-like split: quotes and backslashes as sh reads them, `$(...)` and `${...}` kept whole,
/// operators and newlines as separate words, `#` comments dropped.
fn split(text: &str) -> Vec<Word> {
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut i = 0;
    let op = |s: &str| Word {
        text: s.to_string(),
        expansion: false,
        quoted: false,
        operator: true,
        substitutions: Vec::new(),
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && chars.get(i + 1) == Some(&'\n') {
            i += 2;
            continue;
        }
        if c == ' ' || c == '\t' {
            i += 1;
            continue;
        }
        if c == '\n' || ";|&()`".contains(c) {
            words.push(op(&c.to_string()));
            i += 1;
            continue;
        }
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if let Some(after) = redirection(&chars, i) {
            i = after;
            continue;
        }
        let quoted = c == '"' || c == '\'';
        let mut text = String::new();
        let mut substitutions = Vec::new();
        let mut only_expansion = true;
        let mut any_expansion = false;
        while i < chars.len() {
            let c = chars[i];
            if c == ' ' || c == '\t' || c == '\n' || ";|&)`".contains(c) {
                break;
            }
            match c {
                '\'' => {
                    i += 1;
                    while i < chars.len() && chars[i] != '\'' {
                        text.push(chars[i]);
                        only_expansion = false;
                        i += 1;
                    }
                    i += 1;
                }
                '"' => {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        if chars[i] == '$' {
                            any_expansion = true;
                            i = expansion(&chars, i, &mut text, &mut substitutions);
                        } else {
                            if chars[i] == '\\' && i + 1 < chars.len() {
                                i += 1;
                            }
                            text.push(chars[i]);
                            only_expansion = false;
                            i += 1;
                        }
                    }
                    i += 1;
                }
                '\\' if i + 1 < chars.len() => {
                    text.push(chars[i + 1]);
                    only_expansion = false;
                    i += 2;
                }
                '$' => {
                    any_expansion = true;
                    i = expansion(&chars, i, &mut text, &mut substitutions);
                }
                _ => {
                    text.push(c);
                    only_expansion = false;
                    i += 1;
                }
            }
        }
        words.push(Word {
            text,
            expansion: any_expansion && only_expansion,
            quoted,
            operator: false,
            substitutions,
        });
    }
    words
}

/// Skips a redirection starting at `i` (`>> file`, `2>&1`, `</dev/null`, `2> err`) and returns
/// the index after it and its target, or `None` if no redirection starts there.
fn redirection(chars: &[char], mut i: usize) -> Option<usize> {
    while i < chars.len() && chars[i].is_ascii_digit() {
        i += 1;
    }
    if !matches!(chars.get(i), Some('>' | '<')) {
        return None;
    }
    while matches!(chars.get(i), Some('>' | '<')) {
        i += 1;
    }
    if chars.get(i) == Some(&'&') {
        i += 1;
    }
    while matches!(chars.get(i), Some(' ' | '\t')) {
        i += 1;
    }
    // The target: one plain word.
    while i < chars.len() && !" \t\n;|&)`".contains(chars[i]) {
        i += 1;
    }
    Some(i)
}

/// Copies one `$...` expansion starting at `i` into `text` (and the command of a `$(...)` into
/// `substitutions`); returns the index after it.
fn expansion(
    chars: &[char],
    mut i: usize,
    text: &mut String,
    substitutions: &mut Vec<String>,
) -> usize {
    text.push('$');
    i += 1;
    match chars.get(i) {
        Some(&open @ ('(' | '{')) => {
            let close = if open == '(' { ')' } else { '}' };
            let start = i + 1;
            let mut depth = 0;
            while i < chars.len() {
                text.push(chars[i]);
                if chars[i] == open {
                    depth += 1;
                } else if chars[i] == close {
                    depth -= 1;
                    if depth == 0 {
                        if open == '(' {
                            substitutions.push(chars[start..i].iter().collect());
                        }
                        return i + 1;
                    }
                }
                i += 1;
            }
            i
        }
        Some(c) if !name_char(*c) => {
            text.push(*c);
            i + 1
        }
        _ => {
            while i < chars.len() && name_char(chars[i]) {
                text.push(chars[i]);
                i += 1;
            }
            i
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invocations_are_found_where_a_command_starts() {
        let cases: &[(&str, &[&[&str]])] = &[
            ("redlock exec k -- true", &[&["exec", "k", "--", "true"]]),
            (
                "T=$(redlock acquire migrate --while-pid $$) || exit",
                &[&["acquire", "migrate", "--while-pid", "1"]],
            ),
            (
                "0 3 * * * /usr/bin/redlock exec backup -n -- ./backup.sh",
                &[&["exec", "backup", "-n", "--", "./backup.sh"]],
            ),
            (
                "  - run: redlock exec deploy \"--wait\" 30m -- ./deploy.sh # queue",
                &[&["exec", "deploy", "--wait", "30m", "--", "./deploy.sh"]],
            ),
            (
                "ExecStart=/usr/bin/redlock exec sync -- ./sync.sh",
                &[&["exec", "sync", "--", "./sync.sh"]],
            ),
            (
                "redlock release k \"$T\" && redlock status",
                &[&["release", "k", "1"], &["status"]],
            ),
            ("redlock: k is held by host:1", &[]),
            ("echo redlock exec k", &[]),
            (
                "redlock log k --follow --json >> k.events 2>&1 </dev/null",
                &[&["log", "k", "--follow", "--json"]],
            ),
            ("the redlock binary", &[]),
        ];
        for (line, want) in cases {
            let got = invocations(line);
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|a| a.iter().map(|s| s.to_string()).collect())
                .collect();
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn a_console_block_reads_into_commands() {
        let md = "text\n```console\n$ redlock acquire k\n[..]\n$ redlock exec k -n \\\n  -- true\n? 1\nredlock: busy\n...\n```\n";
        let (blocks, problems) = blocks(md);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].kind, Kind::Console);
        let commands = commands(&blocks[0]).unwrap();
        assert_eq!(commands.len(), 2);
        assert_eq!(commands[0].line, 3);
        assert_eq!(commands[0].expected, vec!["[..]"]);
        assert_eq!(commands[1].text, "redlock exec k -n \\\n  -- true");
        assert_eq!(commands[1].status, 1);
        assert_eq!(commands[1].expected, vec!["redlock: busy", "..."]);
    }

    #[test]
    fn fences_without_a_language_and_indented_commands_are_problems() {
        let (_, problems) = blocks("```\nx\n```\n\n    redlock exec k -- true\n");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
