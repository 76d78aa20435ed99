//! `tollgate import`: translates a haproxy.cfg or an nginx.conf into a
//! Tollgate config, as commented TOML.
//!
//! Each source is read into its own syntax (HAProxy's sections of lines,
//! nginx's blocks of directives, includes followed), then translated into
//! [`out::Out`], the tables of the TOML file, which is rendered once. Every
//! directive ends up either as keys (with the directive as a comment above
//! them) or as a [`Warning`] (with the directive's file:line), which is also
//! written as a comment where it would have gone: nothing is dropped silently.

#![forbid(unsafe_code)]

mod haproxy;
mod nginx;
pub mod out;
mod report;
mod units;

pub use report::{Kind, Pos, Warning};
use std::fmt;
use std::path::{Path, PathBuf};

/// The formats `tollgate import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Haproxy,
    Nginx,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Haproxy => "haproxy",
            Format::Nginx => "nginx",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "haproxy" => Ok(Format::Haproxy),
            "nginx" => Ok(Format::Nginx),
            _ => Err(format!("unknown format `{s}` (haproxy or nginx)")),
        }
    }
}

/// The result of a translation.
#[derive(Debug)]
pub struct Imported {
    pub format: Format,
    /// The Tollgate config, as TOML with comments.
    pub toml: String,
    /// What was not carried over exactly, in source order.
    pub warnings: Vec<Warning>,
    /// Whether the config has something to run (a frontend that listens).
    pub usable: bool,
}

/// Why nothing could be translated.
#[derive(Debug)]
pub enum Error {
    /// A file (the config or one it includes) could not be read.
    Read { path: PathBuf, error: std::io::Error },
    /// Neither format recognized.
    Unknown { path: PathBuf },
    /// A syntax error the reader cannot go past (an unclosed block...).
    Syntax { pos: Pos, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            Error::Unknown { path } => write!(
                f,
                "{}: not recognized as a haproxy.cfg or an nginx.conf (give --from haproxy or --from nginx)",
                path.display()
            ),
            Error::Syntax { pos, message } => write!(f, "{pos}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// Environment variables HAProxy expands in `"${NAME}"` and unquoted words.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Translates the file at `path`, detecting its format unless `from` says it.
/// With `root`, files the config names by absolute path (includes, htpasswd
/// files, ACL files) are read under it, as for a config copied from another
/// machine.
pub fn import_file(path: &Path, from: Option<Format>, root: Option<&Path>) -> Result<Imported, Error> {
    import_file_with(path, from, root, &|name| std::env::var(name).ok())
}

/// [`import_file`] with the environment given.
pub fn import_file_with(path: &Path, from: Option<Format>, root: Option<&Path>, env: Env) -> Result<Imported, Error> {
    let text = read(path)?;
    let format = match from.or_else(|| detect(&text)) {
        Some(f) => f,
        None => return Err(Error::Unknown { path: path.to_path_buf() }),
    };
    import_str(&text, path, format, root, env)
}

/// Translates `text`, read from `path` (which names it in warnings; an
/// nginx.conf's relative includes are read beside it).
pub fn import_str(text: &str, path: &Path, format: Format, root: Option<&Path>, env: Env) -> Result<Imported, Error> {
    let (mut out, warnings) = match format {
        Format::Haproxy => haproxy::translate(text, path, root, env)?,
        Format::Nginx => nginx::translate(text, path, root)?,
    };
    out.keep_path_case();
    Ok(Imported { format, usable: out.usable(), toml: out.render(), warnings })
}

/// Where a file the config names is read: an absolute path under `root`
/// when there is one.
pub(crate) fn resolve(root: Option<&Path>, file: &Path) -> PathBuf {
    match root {
        Some(r) if file.is_absolute() => r.join(file.strip_prefix("/").unwrap_or(file)),
        _ => file.to_path_buf(),
    }
}

/// A path read under `root`, as the config names it.
pub(crate) fn shown(root: Option<&Path>, path: &Path) -> String {
    match root.and_then(|r| path.strip_prefix(r).ok()) {
        Some(rest) => Path::new("/").join(rest).display().to_string(),
        None => path.display().to_string(),
    }
}

fn read(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|error| Error::Read { path: path.to_path_buf(), error })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Which format `text` is in: HAProxy's section keywords at the start of a
/// line, or nginx's blocks and semicolons.
pub fn detect(text: &str) -> Option<Format> {
    let mut haproxy = 0;
    let mut nginx = 0;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let first = line.split_whitespace().next().unwrap_or("");
        match first {
            "global" | "defaults" | "frontend" | "backend" | "listen" | "userlist" | "resolvers" | "peers"
                if !line.contains('{') && !line.ends_with(';') =>
            {
                haproxy += 1;
            }
            "http" | "server" | "upstream" | "events" | "location" | "stream" if line.ends_with('{') => nginx += 1,
            _ => {}
        }
        if line.ends_with(';') {
            nginx += 1;
        }
    }
    match (haproxy, nginx) {
        (0, 0) => None,
        (h, n) if h >= n => Some(Format::Haproxy),
        _ => Some(Format::Nginx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_formats() {
        assert_eq!(detect("global\n  maxconn 10\nfrontend a\n  bind :80\n"), Some(Format::Haproxy));
        assert_eq!(detect("server {\n listen 80;\n}\n"), Some(Format::Nginx));
        assert_eq!(detect("http {\n server {\n listen 80;\n }\n}\n"), Some(Format::Nginx));
        assert_eq!(detect("hello\n"), None);
    }
}
