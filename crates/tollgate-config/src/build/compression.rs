//! `compression` on a frontend or a backend: `true` (the defaults), `false`,
//! or a table of codings, media types, minimum size and levels.

use super::*;

/// The media types compressed by default: text, and the structured formats
/// that compress well (nginx's `gzip_types` list, extended as Caddy's).
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/wasm",
    "application/manifest+json",
    "image/svg+xml",
    "font/ttf",
    "font/otf",
];

impl Compression {
    /// `compression = true`: zstd, gzip and br in that order of preference,
    /// the default types, 1 KiB at least, and the levels that save at least
    /// as many bytes per CPU-second as nginx's gzip at its default level 1
    /// (bench/compress_bench.py, docs/benchmarks.md): zstd 3, gzip 2, br 1.
    /// At those levels zstd saves the most for the least CPU, and gzip more
    /// than br for the same CPU, hence the order.
    pub fn defaults() -> Self {
        Compression {
            enabled: true,
            codings: vec![Coding::Zstd, Coding::Gzip, Coding::Br],
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
            min_size: 1024,
            gzip_level: 2,
            br_level: 1,
            zstd_level: 3,
            decompress: false,
        }
    }
}

impl Builder<'_> {
    pub(super) fn compression(&mut self, c: Option<&Spanned<RawCompression>>, key: &str) -> Option<Arc<Compression>> {
        let c = c?;
        let span = c.span();
        let t = match c.get_ref() {
            RawCompression::On(true) => return Some(Arc::new(Compression::defaults())),
            RawCompression::On(false) => {
                return Some(Arc::new(Compression { enabled: false, ..Compression::defaults() }));
            }
            RawCompression::Table(t) => t,
        };
        let mut out = Compression::defaults();
        if let Some(codings) = &t.codings {
            out.codings.clear();
            for (i, name) in codings.iter().enumerate() {
                let coding = match name.to_ascii_lowercase().as_str() {
                    "gzip" => Coding::Gzip,
                    "br" => Coding::Br,
                    "zstd" => Coding::Zstd,
                    other => {
                        self.err(
                            span.clone(),
                            format!("{key}.codings[{i}]"),
                            format!("`{other}` is not a coding (gzip, br or zstd)"),
                        );
                        continue;
                    }
                };
                if out.codings.contains(&coding) {
                    self.err(span.clone(), format!("{key}.codings[{i}]"), format!("`{name}` is listed twice"));
                }
                out.codings.push(coding);
            }
            if codings.is_empty() {
                self.err(
                    span.clone(),
                    format!("{key}.codings"),
                    "names no coding (leave `compression` out, or set it to false)",
                );
            }
        }
        if let Some(types) = &t.types {
            out.types.clear();
            for (i, ty) in types.iter().enumerate() {
                let lower = ty.trim().to_ascii_lowercase();
                let token = |s: &str| !s.is_empty() && s.bytes().all(is_tchar);
                let valid = lower.split_once('/').is_some_and(|(top, sub)| token(top) && (sub == "*" || token(sub)));
                if !valid {
                    self.err(
                        span.clone(),
                        format!("{key}.types[{i}]"),
                        format!("`{ty}` is not a media type (`text/html`, `text/*`)"),
                    );
                    continue;
                }
                out.types.push(lower);
            }
        }
        if let Some(size) = &t.min_size {
            let size = Spanned::new(span.clone(), size.clone());
            if let Some(n) = self.size(&size, &format!("{key}.min_size")) {
                out.min_size = n;
            }
        }
        if let Some(l) = &t.level {
            let level = |b: &mut Self, v: Option<i64>, name: &str, range: std::ops::RangeInclusive<i64>| match v {
                Some(n) if range.contains(&n) => Some(n),
                Some(n) => {
                    b.err(
                        span.clone(),
                        format!("{key}.level.{name}"),
                        format!("{n} is out of range ({}..={})", range.start(), range.end()),
                    );
                    None
                }
                None => None,
            };
            if let Some(n) = level(self, l.gzip, "gzip", 1..=9) {
                out.gzip_level = n as u32;
            }
            if let Some(n) = level(self, l.br, "br", 0..=11) {
                out.br_level = n as u32;
            }
            if let Some(n) = level(self, l.zstd, "zstd", 1..=19) {
                out.zstd_level = n as i32;
            }
        }
        out.decompress = t.decompress.unwrap_or(false);
        Some(Arc::new(out))
    }
}
