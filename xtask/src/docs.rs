//! The user documents as runnable text: every `sh` block of the README and the guide is
//! run as written, every output they show is compared with what the command prints, and
//! every image made by a block is compared with the committed one.
//!
//! A shown output is a `text` block that starts with `$ COMMAND` (the command, then what it
//! prints: stdout and stderr together, as a terminal shows them), or a `text` block right
//! after an `sh` block (what that block prints on stdout). Cargo's own lines about
//! building are left out (`CARGO_TERM_QUIET`). Lines compare without trailing spaces; a number
//! written `~12.5` in a shown output is a timing and stands for any number; a line `...`
//! stands for any lines. An image is checked
//! when the line before it is `<!-- made by the block above: PATH -->`.

use std::path::{Path, PathBuf};

/// The documents whose blocks are run: the README, then the guide's pages by name.
pub fn user_docs(root: &Path) -> Result<Vec<PathBuf>, String> {
    let guide = root.join("docs/guide");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&guide)
        .map_err(|e| format!("{}: {e}", guide.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    pages.insert(0, root.join("README.md"));
    Ok(pages)
}

/// One thing a document asks to run.
#[derive(Debug, PartialEq)]
pub enum Block {
    /// An `sh` block, and the output shown right after it, if any.
    Sh {
        /// The block's first line in the document, counted from 1.
        line: usize,
        code: String,
        shown: Option<Shown>,
    },
    /// A `text` block that starts with `$ COMMAND`.
    Transcript { command: String, shown: Shown },
}

/// A shown output: where its text starts, and its lines.
#[derive(Debug, PartialEq)]
pub struct Shown {
    /// The first line of the output in the document, counted from 1.
    pub line: usize,
    pub lines: Vec<String>,
}

/// A fenced block: its info string, its body's first line (counted from 1), its body, and
/// whether only blank lines separate it from the fenced block before it.
struct Fence {
    info: String,
    start: usize,
    body: Vec<String>,
    right_after: bool,
}

/// Every fenced block of `text`, in order.
fn fences(text: &str) -> Vec<Fence> {
    let mut fences: Vec<Fence> = Vec::new();
    let mut open: Option<Fence> = None;
    // Whether only blank lines came since the last fence closed (none closed yet: false).
    let mut blank_since_close = false;
    for (i, line) in text.lines().enumerate() {
        match &mut open {
            None => match line.trim_end().strip_prefix("```") {
                Some(info) => {
                    open = Some(Fence {
                        info: info.to_owned(),
                        start: i + 2,
                        body: Vec::new(),
                        right_after: blank_since_close,
                    });
                }
                None => blank_since_close &= line.trim().is_empty(),
            },
            Some(_) if line.trim_end() == "```" => {
                fences.extend(open.take());
                blank_since_close = true;
            }
            Some(fence) => fence.body.push(line.to_owned()),
        }
    }
    fences
}

/// The blocks of a document, in order. `cargo xtask ci` is left out: it is the command
/// that runs the blocks.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    // Whether the fence before was an `sh` block that `out` ends with.
    let mut after_sh = false;
    for fence in fences(text) {
        let was_after_sh = std::mem::take(&mut after_sh);
        let Fence {
            info,
            start,
            body,
            right_after,
        } = fence;
        match info.as_str() {
            "sh" => {
                let code = body.iter().map(|l| format!("{l}\n")).collect::<String>();
                if code.trim() != "cargo xtask ci" {
                    out.push(Block::Sh {
                        line: start,
                        code,
                        shown: None,
                    });
                    after_sh = true;
                }
            }
            "text" => {
                if let Some(command) = body.first().and_then(|l| l.strip_prefix("$ ")) {
                    out.push(Block::Transcript {
                        command: command.to_owned(),
                        shown: Shown {
                            line: start + 1,
                            lines: body[1..].to_vec(),
                        },
                    });
                } else if was_after_sh
                    && right_after
                    && let Some(Block::Sh { shown, .. }) = out.last_mut()
                {
                    *shown = Some(Shown {
                        line: start,
                        lines: body,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether `actual` is what `shown` shows: line by line, trailing spaces and trailing
/// blank lines ignored, a `~NUMBER` in `shown` matching any number, and a line `...` in
/// `shown` standing for any lines (none included). On a difference, the line of `shown`
/// where matching got furthest (its index) with the two texts there.
pub fn compare(shown: &[String], actual: &str) -> Result<(), (usize, String, String)> {
    let trim = |lines: Vec<&str>| -> Vec<String> {
        let mut v: Vec<String> = lines.iter().map(|l| l.trim_end().to_owned()).collect();
        while v.last().is_some_and(String::is_empty) {
            v.pop();
        }
        v
    };
    let want = trim(shown.iter().map(String::as_str).collect());
    let got = trim(actual.lines().collect());
    let mut furthest = (0, 0);
    if matches_from(&want, &got, 0, 0, &mut furthest) {
        return Ok(());
    }
    let (w, g) = furthest;
    Err((
        w,
        want.get(w).cloned().unwrap_or_else(|| "(nothing)".into()),
        got.get(g).cloned().unwrap_or_else(|| "(nothing)".into()),
    ))
}

/// `want[w..]` against `got[g..]`, remembering the furthest pair of lines reached.
fn matches_from(
    want: &[String],
    got: &[String],
    w: usize,
    g: usize,
    furthest: &mut (usize, usize),
) -> bool {
    if w > furthest.0 || (w == furthest.0 && g > furthest.1) {
        *furthest = (w, g);
    }
    match want.get(w) {
        None => g == got.len(),
        Some(line) if line == "..." => {
            (g..=got.len()).any(|skip| matches_from(want, got, w + 1, skip, furthest))
        }
        Some(line) => {
            got.get(g)
                .is_some_and(|got_line| line_matches(line, got_line))
                && matches_from(want, got, w + 1, g + 1, furthest)
        }
    }
}

/// One line: literal text, with `~NUMBER` in `want` matching any number in `got`.
fn line_matches(want: &str, got: &str) -> bool {
    let (mut w, mut g) = (want, got);
    loop {
        let Some(at) = w.find('~').filter(|&at| starts_number(&w[at + 1..])) else {
            return w == g;
        };
        let (literal, rest) = w.split_at(at);
        let Some(after) = g.strip_prefix(literal) else {
            return false;
        };
        let skip = |s: &str| s.len() - s.trim_start_matches(is_number_char).len();
        if skip(after) == 0 || !starts_number(after) {
            return false;
        }
        w = &rest[1 + skip(&rest[1..])..];
        g = &after[skip(after)..];
    }
}

fn is_number_char(c: char) -> bool {
    c.is_ascii_digit() || c == '.'
}

fn starts_number(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit())
}

/// The committed images a document checks: (line, committed path, path the blocks make),
/// both relative to the repository root.
pub fn images(
    doc: &Path,
    root: &Path,
    text: &str,
) -> Result<Vec<(usize, PathBuf, PathBuf)>, String> {
    let dir = doc.parent().unwrap_or(root);
    let mut out = Vec::new();
    let mut made: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(path) = line
            .strip_prefix("<!-- made by the block above: ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            made = Some(path);
            continue;
        }
        if let Some(made) = made.take() {
            let link = line
                .strip_prefix("![")
                .and_then(|l| l.split_once("]("))
                .and_then(|(_, l)| l.strip_suffix(')'))
                .ok_or_else(|| {
                    format!(
                        "{}:{}: an image must follow its `made by` line",
                        doc.display(),
                        i + 1
                    )
                })?;
            out.push((i + 1, dir.join(link), root.join(made)));
        }
    }
    Ok(out)
}

/// The document with each `<!-- file: PATH -->` code block replaced by that file's text, so
/// the examples shown are the files that compile and are tested.
pub fn with_fresh_examples(root: &Path, doc: &Path) -> Result<String, String> {
    let shown = doc.display();
    let text = std::fs::read_to_string(doc).map_err(|e| format!("{shown}: {e}"))?;
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("<!-- file: ") {
        let after = &rest[at + "<!-- file: ".len()..];
        let file = &after[..after
            .find(" -->")
            .ok_or_else(|| format!("{shown}: unterminated file marker"))?];
        let fence = after
            .find("```")
            .ok_or_else(|| format!("{shown}: file marker without a code block"))?;
        let body_start = fence
            + after[fence..]
                .find('\n')
                .ok_or_else(|| format!("{shown}: bad fence"))?
            + 1;
        let body_end = body_start
            + after[body_start..]
                .find("```")
                .ok_or_else(|| format!("{shown}: unclosed code block"))?;
        let example =
            std::fs::read_to_string(root.join(file)).map_err(|e| format!("{file}: {e}"))?;
        let head_len = at + "<!-- file: ".len() + body_start;
        out.push_str(&rest[..head_len]);
        out.push_str(&example);
        rest = &rest[at + "<!-- file: ".len() + body_end..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_text_block_is_an_output_only_right_after_an_sh_block_or_after_a_dollar() {
        let doc = "```sh\ncargo xtask ci\n```\n```sh\necho a\n```\n\n```text\na\n```\n\
                   prose\n```sh\necho b\n```\nprose\n```text\nnot b\n```\n\
                   ```text\n$ echo c\nc\n```\n```bash\nd\n```\n\
                   ```sh\necho e\n```\n```yaml\nf: 1\n```\n```text\nnot e\n```\n";
        let got = blocks(doc);
        assert_eq!(
            got,
            [
                Block::Sh {
                    line: 5,
                    code: "echo a\n".into(),
                    shown: Some(Shown {
                        line: 9,
                        lines: lines("a")
                    }),
                },
                Block::Sh {
                    line: 13,
                    code: "echo b\n".into(),
                    shown: None,
                },
                Block::Transcript {
                    command: "echo c".into(),
                    shown: Shown {
                        line: 21,
                        lines: lines("c")
                    },
                },
                // A text block right after a yaml block shows no command's output.
                Block::Sh {
                    line: 27,
                    code: "echo e\n".into(),
                    shown: None,
                },
            ]
        );
    }

    /// A planted wrong number fails; a timing written `~N` matches any number.
    #[test]
    fn outputs_compare_exactly_but_for_marked_timings() {
        let shown =
            lines("hit ratio   0.9266\nreplayed 2200 requests in ~0.042 s (~52392 decisions/s)");
        let actual =
            "hit ratio   0.9266  \nreplayed 2200 requests in 0.051 s (43137 decisions/s)\n\n";
        assert_eq!(compare(&shown, actual), Ok(()));
        let planted = "hit ratio   0.9267\nreplayed 2200 requests in 0.051 s (43137 decisions/s)\n";
        assert_eq!(
            compare(&shown, planted),
            Err((0, "hit ratio   0.9266".into(), "hit ratio   0.9267".into()))
        );
        // Only a marked number is free: the count beside it is not.
        let fewer = "hit ratio   0.9266\nreplayed 2100 requests in 0.051 s (43137 decisions/s)\n";
        assert_eq!(compare(&shown, fewer).map_err(|e| e.0), Err(1));
        // A line missing or added is a difference too.
        assert_eq!(
            compare(&shown, "hit ratio   0.9266\n").map_err(|e| e.0),
            Err(1)
        );
        assert!(compare(&lines("a"), "a\nb\n").is_err());
        // `...` skips lines, as many as it takes, and none at all.
        let elided = lines("a\n...\nd\n...");
        assert_eq!(compare(&elided, "a\nb\nc\nd\n"), Ok(()));
        assert_eq!(compare(&elided, "a\nd\n"), Ok(()));
        assert_eq!(compare(&elided, "a\nb\nc\n").map_err(|e| e.0), Err(2));
        // `~` not before a number is literal.
        assert!(line_matches("~ home", "~ home"));
        assert!(!line_matches("~1 s", "x s"));
    }
}
