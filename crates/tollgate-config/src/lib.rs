//! Tollgate's configuration.
//!
//! A TOML file is read in two steps ("parse, don't validate"):
//! 1. serde reads it into [`raw`], a loose mirror of the file that keeps spans;
//! 2. [`build`] turns that into the typed [`model`], checking every value and every
//!    reference, and collecting *all* problems, each with file:line, the key path and
//!    what is wrong.
//!
//! This crate does no async I/O: it reads the file (and error pages, and the TLS
//! certificates and keys) and resolves server host names once, at load time.

#![forbid(unsafe_code)]

pub mod acme;
mod build;
pub mod discover;
pub mod etcd;
pub mod forward;
mod host;
mod log_format;
pub mod model;
pub mod path;
pub mod raw;
mod recover;
pub mod tier;
mod tls;
pub mod track;
pub mod units;

pub use acme::{Acme, AcmeChallenge};
pub use build::parse_password_hash;
pub use build::{binds_overlap, is_tchar, valid_name};
pub use discover::Discover;
pub use etcd::Etcd;
pub use forward::Forward;
pub use host::{HostName, HostPort};
pub use log_format::{LogField, LogPiece, parse_log_template};
pub use model::*;
pub use tls::certified_key;
pub use tls::provider as tls_provider;
pub use track::*;

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the problem has no place in the file (e.g. it cannot be read).
    pub line: usize,
    pub column: usize,
    /// Dotted key path, e.g. `backend[0].server[1].weight`.
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn at(file: &Path, src: &str, span: Range<usize>, key: String, message: String) -> Self {
        let (line, column) = line_col(src, span.start);
        ConfigError { file: file.to_path_buf(), line, column, key, message }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in one config file.
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let src = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            key: String::new(),
            message: format!("cannot read the config: {e}"),
        }])
    })?;
    parse(&src, path)
}

/// Validates config text; `path` names it in errors and anchors relative paths.
pub fn parse(src: &str, path: &Path) -> Result<Config, ConfigErrors> {
    parse_inner(src, path, false)
}

/// Like [`parse`], without touching the network or the file system: server
/// addresses must be literal `IP:port`, and error pages and TLS certificates are
/// refused. For fuzzing.
pub fn parse_offline(src: &str, path: &Path) -> Result<Config, ConfigErrors> {
    parse_inner(src, path, true)
}

/// Like [`parse`], for a config that is not a file (etcd's `<prefix>config`):
/// errors name `name`, and relative paths in it are read from `base`.
pub fn parse_from(src: &str, name: &Path, base: &Path) -> Result<Config, ConfigErrors> {
    parse_in(src, name, Some(base), false)
}

fn parse_inner(src: &str, path: &Path, offline: bool) -> Result<Config, ConfigErrors> {
    parse_in(src, path, None, offline)
}

fn parse_in(src: &str, path: &Path, base: Option<&Path>, offline: bool) -> Result<Config, ConfigErrors> {
    let error_at = |(offset, message): (usize, String)| {
        let (line, column) = line_col(src, offset);
        ConfigError { file: path.to_path_buf(), line, column, key: key_path_at(src, offset), message }
    };
    let (raw, mut errors) = match recover::read(src) {
        recover::Read::Clean(raw) => (raw, Vec::new()),
        recover::Read::UnknownKeys(raw, found) => (raw, found.into_iter().map(error_at).collect()),
        recover::Read::Broken(found) => return Err(ConfigErrors(found.into_iter().map(error_at).collect())),
    };
    let mut b = build::Builder {
        file: path,
        base,
        src,
        offline,
        errors: Vec::new(),
        warnings: Vec::new(),
        system_roots: None,
        acme_index: std::collections::HashMap::new(),
        has_peers: false,
    };
    match b.build(raw) {
        Some(mut c) if errors.is_empty() => {
            once_each_in_file_order(&mut c.warnings);
            Ok(c)
        }
        _ => {
            errors.append(&mut b.errors);
            once_each_in_file_order(&mut errors);
            Err(ConfigErrors(errors))
        }
    }
}

/// A backend's `tls` is built again for each of its servers (each has its own
/// name to verify): an error or warning in it (`verify = "none"`) is said once.
fn once_each_in_file_order(found: &mut Vec<ConfigError>) {
    found.sort_by_key(|e| (e.line, e.column));
    found.dedup();
}

fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
    let column = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, column)
}

/// The dotted key path of the deepest key or value that holds byte `offset`. Used
/// for errors serde reports by span only.
fn key_path_at(src: &str, offset: usize) -> String {
    recover::locate(src, offset).map(|(path, _)| path).unwrap_or_default()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_acme;
#[cfg(test)]
mod tests_auth;
#[cfg(test)]
mod tests_discover;
#[cfg(test)]
mod tests_forward;
#[cfg(test)]
mod tests_path;
#[cfg(test)]
mod tests_tcp;
#[cfg(test)]
mod tests_tls;
#[cfg(test)]
mod tests_track;
