//! nginx's syntax: directives `name arg ...;` and blocks `name arg ... { ... }`,
//! `#` comments, quoted strings with backslash escapes, variables left as text.
//! `include` is followed where it stands (globs too), so that the tree holds
//! every directive with the file and line it was read from.

use crate::{Error, Pos};
use std::path::{Path, PathBuf};

/// How deep includes may nest before it is taken for a loop.
pub const MAX_INCLUDE_DEPTH: usize = 16;
/// How deep blocks may nest (over all files).
pub const MAX_BLOCK_DEPTH: usize = 64;

/// One directive, with its block when it has one.
#[derive(Debug, Clone)]
pub struct Directive {
    /// Unique in a parse, in source order (includes followed in place).
    pub id: usize,
    pub name: String,
    /// The arguments, unquoted and unescaped.
    pub args: Vec<String>,
    /// The arguments as written (quotes kept), for messages.
    raw: Vec<String>,
    pub pos: Pos,
    pub block: Option<Vec<Directive>>,
    /// An `include` that could not be followed, and why.
    pub unresolved: Option<String>,
}

impl Directive {
    /// Argument `i`, or "" when there is none.
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map(String::as_str).unwrap_or("")
    }

    /// The directives of its block (none when it has no block).
    pub fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }

    /// The directive as written, whitespace collapsed.
    pub fn text(&self) -> String {
        let mut s = self.name.clone();
        for r in &self.raw {
            s.push(' ');
            s.push_str(r);
        }
        if self.block.is_some() {
            s.push_str(" { ... }");
        }
        s
    }

    /// The directive as written, with `{` for a block.
    pub fn head(&self) -> String {
        let mut s = self.name.clone();
        for r in &self.raw {
            s.push(' ');
            s.push_str(r);
        }
        if self.block.is_some() {
            s.push_str(" {");
        }
        s
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word { text: String, raw: String, line: usize },
    Semi(usize),
    Open(usize),
    Close(usize),
}

fn syntax(file: &Path, line: usize, message: impl Into<String>) -> Error {
    Error::Syntax { pos: Pos { file: file.to_path_buf(), line }, message: message.into() }
}

/// Reads `\x` at `chars[i]` (`chars[i]` is the backslash): what it stands
/// for, as nginx unescapes `\"`, `\'`, `\\`, `\t`, `\r`, `\n` and keeps the
/// others as they are.
fn escape(chars: &[char], i: usize, text: &mut String, raw: &mut String) -> usize {
    let Some(&n) = chars.get(i + 1) else {
        text.push('\\');
        raw.push('\\');
        return 1;
    };
    raw.push('\\');
    raw.push(n);
    match n {
        '"' | '\'' | '\\' => text.push(n),
        't' => text.push('\t'),
        'r' => text.push('\r'),
        'n' => text.push('\n'),
        _ => {
            text.push('\\');
            text.push(n);
        }
    }
    2
}

fn tokenize(src: &str, file: &Path) -> Result<Vec<Tok>, Error> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while let Some(&c) = chars.get(i) {
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '#' => {
                while chars.get(i).is_some_and(|&c| c != '\n') {
                    i += 1;
                }
            }
            ';' => {
                toks.push(Tok::Semi(line));
                i += 1;
            }
            '{' => {
                toks.push(Tok::Open(line));
                i += 1;
            }
            '}' => {
                toks.push(Tok::Close(line));
                i += 1;
            }
            '"' | '\'' => {
                let start = line;
                let mut text = String::new();
                let mut raw = String::from(c);
                i += 1;
                loop {
                    let Some(&ch) = chars.get(i) else {
                        return Err(syntax(file, start, format!("unterminated quoted string (the {c} opened here)")));
                    };
                    if ch == '\\' {
                        if chars.get(i + 1) == Some(&'\n') {
                            line += 1;
                        }
                        i += escape(&chars, i, &mut text, &mut raw);
                        continue;
                    }
                    i += 1;
                    raw.push(ch);
                    if ch == c {
                        break;
                    }
                    if ch == '\n' {
                        line += 1;
                    }
                    text.push(ch);
                }
                toks.push(Tok::Word { text, raw, line: start });
            }
            _ => {
                let start = line;
                let mut text = String::new();
                let mut raw = String::new();
                while let Some(&ch) = chars.get(i) {
                    if ch.is_whitespace() || ch == ';' || ch == '{' || ch == '}' {
                        break;
                    }
                    if ch == '\\' {
                        if chars.get(i + 1) == Some(&'\n') {
                            line += 1;
                        }
                        i += escape(&chars, i, &mut text, &mut raw);
                        continue;
                    }
                    if ch == '$' && chars.get(i + 1) == Some(&'{') {
                        // `${name}`: the braces belong to the word.
                        let end = chars[i..].iter().position(|&c| c == '}' || c == '\n' || c == ';');
                        match end.and_then(|e| chars.get(i + e).map(|&c| (e, c))) {
                            Some((e, '}')) => {
                                let part: String = chars[i..=i + e].iter().collect();
                                text.push_str(&part);
                                raw.push_str(&part);
                                i += e + 1;
                                continue;
                            }
                            _ => return Err(syntax(file, line, "`${` without its closing `}`")),
                        }
                    }
                    text.push(ch);
                    raw.push(ch);
                    i += 1;
                }
                toks.push(Tok::Word { text, raw, line: start });
            }
        }
    }
    Ok(toks)
}

/// Reads nginx config files into directives.
pub struct Parser {
    /// The main config's directory: includes are looked for there too.
    main_dir: PathBuf,
    root: Option<PathBuf>,
    next_id: usize,
}

impl Parser {
    pub fn new(main: &Path, root: Option<&Path>) -> Parser {
        let main_dir = main.parent().map(Path::to_path_buf).unwrap_or_default();
        Parser { main_dir, root: root.map(Path::to_path_buf), next_id: 0 }
    }

    /// Parses the text of the main config.
    pub fn parse(&mut self, text: &str, file: &Path) -> Result<Vec<Directive>, Error> {
        self.parse_text(text, file, 0, 0)
    }

    fn parse_text(&mut self, text: &str, file: &Path, depth: usize, blocks: usize) -> Result<Vec<Directive>, Error> {
        let toks = tokenize(text, file)?;
        let mut i = 0;
        self.block(&toks, &mut i, file, depth, blocks, None)
    }

    fn block(
        &mut self,
        toks: &[Tok],
        i: &mut usize,
        file: &Path,
        depth: usize,
        blocks: usize,
        open: Option<(usize, &str)>,
    ) -> Result<Vec<Directive>, Error> {
        let mut out = Vec::new();
        let mut words: Vec<(String, String)> = Vec::new();
        let mut first = 0;
        loop {
            let Some(tok) = toks.get(*i) else {
                if !words.is_empty() {
                    return Err(syntax(file, first, "unexpected end of file, expecting \";\" or \"}\""));
                }
                if let Some((line, name)) = open {
                    return Err(syntax(
                        file,
                        line,
                        format!(
                            "unexpected end of file: the block of `{name}` opened here is not closed (expecting \"}}\")"
                        ),
                    ));
                }
                return Ok(out);
            };
            *i += 1;
            match tok {
                Tok::Word { text, raw, line } => {
                    if words.is_empty() {
                        first = *line;
                    }
                    words.push((text.clone(), raw.clone()));
                }
                Tok::Semi(_) => {
                    if words.is_empty() {
                        continue;
                    }
                    let d = self.directive(std::mem::take(&mut words), file, first, None);
                    if d.name == "include" && d.args.len() == 1 {
                        out.extend(self.include(d, file, depth, blocks)?);
                    } else {
                        out.push(d);
                    }
                }
                Tok::Open(line) => {
                    if words.is_empty() {
                        return Err(syntax(file, *line, "unexpected \"{\" (a block needs a name)"));
                    }
                    if blocks + 1 > MAX_BLOCK_DEPTH {
                        return Err(syntax(file, *line, format!("blocks nested deeper than {MAX_BLOCK_DEPTH}")));
                    }
                    let words = std::mem::take(&mut words);
                    let name = words.first().map(|w| w.0.clone()).unwrap_or_default();
                    // The id is taken before the block's directives, in source order.
                    let mut d = self.directive(words, file, first, Some(Vec::new()));
                    let inner = self.block(toks, i, file, depth, blocks + 1, Some((first, &name)))?;
                    d.block = Some(inner);
                    out.push(d);
                }
                Tok::Close(line) => {
                    if !words.is_empty() {
                        return Err(syntax(file, first, "unexpected \"}\": the directive before it has no \";\""));
                    }
                    if open.is_none() {
                        return Err(syntax(file, *line, "unexpected \"}\""));
                    }
                    return Ok(out);
                }
            }
        }
    }

    fn directive(
        &mut self,
        words: Vec<(String, String)>,
        file: &Path,
        line: usize,
        block: Option<Vec<Directive>>,
    ) -> Directive {
        let id = self.next_id;
        self.next_id += 1;
        let mut it = words.into_iter();
        let name = it.next().map(|w| w.0).unwrap_or_default();
        let (args, raw) = it.unzip();
        Directive { id, name, args, raw, pos: Pos { file: file.to_path_buf(), line }, block, unresolved: None }
    }

    /// Follows `include PATTERN`: the directives of the files it names, or the
    /// include itself, marked unresolved, when nothing can be read.
    fn include(&mut self, mut d: Directive, file: &Path, depth: usize, blocks: usize) -> Result<Vec<Directive>, Error> {
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(Error::Syntax {
                pos: d.pos.clone(),
                message: format!("includes nested deeper than {MAX_INCLUDE_DEPTH} (a loop?)"),
            });
        }
        let pattern = d.arg(0).to_string();
        let mut candidates = Vec::new();
        if Path::new(&pattern).is_absolute() {
            candidates.push(crate::resolve(self.root.as_deref(), Path::new(&pattern)));
        } else {
            let here = file.parent().map(|p| p.join(&pattern)).unwrap_or_else(|| PathBuf::from(&pattern));
            let main = self.main_dir.join(&pattern);
            candidates.push(here.clone());
            if main != here {
                candidates.push(main);
            }
        }
        let is_glob = pattern.contains(['*', '?', '[']);
        for cand in candidates {
            let files: Vec<PathBuf> = if is_glob {
                let Ok(paths) = glob::glob(&cand.to_string_lossy()) else { continue };
                let mut files: Vec<PathBuf> = paths.filter_map(Result::ok).filter(|p| p.is_file()).collect();
                files.sort();
                files
            } else if cand.is_file() {
                vec![cand]
            } else {
                continue;
            };
            if files.is_empty() {
                continue;
            }
            let mut out = Vec::new();
            for f in files {
                match std::fs::read(&f) {
                    Ok(bytes) => {
                        let text = String::from_utf8_lossy(&bytes);
                        out.extend(self.parse_text(&text, &f, depth + 1, blocks)?);
                    }
                    Err(e) => {
                        let mut u = d.clone();
                        let f = crate::shown(self.root.as_deref(), &f);
                        u.unresolved = Some(format!("cannot read {f}: {e}: not followed"));
                        out.push(u);
                    }
                }
            }
            return Ok(out);
        }
        d.unresolved = Some(if is_glob {
            format!("no file matches {pattern}: nothing included")
        } else {
            format!("cannot read {pattern}: not followed")
        });
        Ok(vec![d])
    }
}
