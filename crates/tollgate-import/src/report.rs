//! What the translation could not carry over: one warning per directive, with
//! the file and line it came from. Each is also a comment in the output, at the
//! place the directive would have gone.

use std::fmt;
use std::path::PathBuf;

/// Where a directive was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    pub file: PathBuf,
    pub line: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Why a directive is not in the output as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directive the importer does not know (a typo, or one it was not taught).
    Unknown,
    /// Known, with no Tollgate equivalent, or one that cannot be carried over.
    NoEquivalent,
    /// Carried over, but not exactly: the message says how it differs.
    Approximate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub pos: Pos,
    pub kind: Kind,
    /// The directive as written (whitespace collapsed).
    pub directive: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            Kind::Unknown => "unknown directive",
            Kind::NoEquivalent => "not translated",
            Kind::Approximate => "approximated",
        };
        write!(f, "{}: {what}: `{}`: {}", self.pos, self.directive, self.message)
    }
}

impl Warning {
    /// The comment written in the output for it.
    pub fn comment(&self) -> String {
        let file = self.pos.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let what = match self.kind {
            Kind::Unknown => "UNKNOWN",
            Kind::NoEquivalent => "NOT TRANSLATED",
            Kind::Approximate => "APPROXIMATED",
        };
        format!("{what} {file}:{}: {}\n  {}", self.pos.line, self.directive, self.message)
    }
}
