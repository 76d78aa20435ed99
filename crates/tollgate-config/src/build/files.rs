//! `static` on a backend: the files of a directory served in place of servers.

use super::*;

/// What a `static` table names that is checked once every backend is known.
pub(super) struct PendingFallback {
    pub backend: usize,
    pub name: Spanned<String>,
    pub key: String,
}

/// Whether `v` is a media type, `type/subtype` with optional parameters
/// (`text/html; charset=utf-8`), as a field value may carry it.
fn media_type(v: &str) -> bool {
    let token = |s: &str| !s.is_empty() && s.bytes().all(is_tchar);
    let essence = v.split(';').next().unwrap_or("").trim();
    HeaderValue::from_str(v).is_ok() && essence.split_once('/').is_some_and(|(top, sub)| token(top) && token(sub))
}

impl Builder<'_> {
    /// A backend's `static` table. Its `fallback` is only named here: the
    /// caller resolves it once every backend is known ([`PendingFallback`]).
    pub(super) fn static_files(
        &mut self,
        raw: &Spanned<RawStatic>,
        key: &str,
        backend: usize,
        pending: &mut Vec<PendingFallback>,
    ) -> Option<StaticFiles> {
        let r = raw.get_ref();
        let key = format!("{key}.static");
        let root_key = format!("{key}.root");
        let mut root = self.base_dir().join(r.root.get_ref());
        if r.root.get_ref().is_empty() {
            self.err(r.root.span(), root_key, "must name a directory");
            return None;
        }
        if !self.offline {
            match std::fs::metadata(&root) {
                Ok(m) if m.is_dir() => root = std::fs::canonicalize(&root).unwrap_or(root),
                Ok(_) => {
                    self.err(r.root.span(), root_key, format!("`{}` is not a directory", root.display()));
                    return None;
                }
                Err(e) => {
                    self.err(r.root.span(), root_key, format!("`{}`: {e}", root.display()));
                    return None;
                }
            }
        }
        let mut index = vec!["index.html".to_string()];
        if let Some(i) = &r.index {
            index = i.get_ref().to_vec();
            for (n, name) in index.iter().enumerate() {
                if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
                    self.err(
                        i.span(),
                        format!("{key}.index[{n}]"),
                        format!("`{name}` is not a file name (no `/`, not `.` or `..`)"),
                    );
                }
            }
        }
        let mut precompressed = Vec::new();
        if let Some(p) = &r.precompressed {
            match p.get_ref() {
                RawPrecompressed::On(true) => precompressed = vec![Coding::Br, Coding::Zstd, Coding::Gzip],
                RawPrecompressed::On(false) => {}
                RawPrecompressed::Codings(names) => {
                    for (n, name) in names.iter().enumerate() {
                        match Coding::from_token(&name.to_ascii_lowercase()) {
                            Some(c) if precompressed.contains(&c) => self.err(
                                p.span(),
                                format!("{key}.precompressed[{n}]"),
                                format!("`{name}` is listed twice"),
                            ),
                            Some(c) => precompressed.push(c),
                            None => self.err(
                                p.span(),
                                format!("{key}.precompressed[{n}]"),
                                format!("`{name}` is not a coding (br, zstd or gzip)"),
                            ),
                        }
                    }
                }
            }
        }
        let mut types = BTreeMap::new();
        if let Some(t) = &r.types {
            for (ext, ty) in t.get_ref() {
                let lower = ext.trim_start_matches('.').to_ascii_lowercase();
                if lower.is_empty() || lower.contains(['/', '.', '\0']) {
                    self.err(
                        t.span(),
                        format!("{key}.types.{ext}"),
                        format!("`{ext}` is not a file extension (`html`, `css`)"),
                    );
                } else if !media_type(ty) {
                    self.err(
                        t.span(),
                        format!("{key}.types.{ext}"),
                        format!("`{ty}` is not a media type (`text/html; charset=utf-8`)"),
                    );
                } else {
                    types.insert(lower, ty.clone());
                }
            }
        }
        let mut default_type = "application/octet-stream".to_string();
        if let Some(d) = &r.default_type {
            if media_type(d.get_ref()) {
                default_type = d.get_ref().clone();
            } else {
                self.err(
                    d.span(),
                    format!("{key}.default_type"),
                    format!("`{}` is not a media type (`application/octet-stream`)", d.get_ref()),
                );
            }
        }
        if let Some(f) = &r.fallback {
            pending.push(PendingFallback { backend, name: f.clone(), key: format!("{key}.fallback") });
        }
        Some(StaticFiles { root, index, fallback: None, precompressed, types, default_type })
    }

    /// A backend's `static` with servers, a cache, or in TCP mode: refused.
    pub(super) fn static_conflicts(&mut self, b: &RawBackend, key: &str, mode: Mode) {
        let Some(s) = &b.files else { return };
        if !b.server.is_empty() {
            self.err(
                s.span(),
                format!("{key}.static"),
                "a backend serves files (`static`) or has servers, not both (`fallback` names a backend for what no file answers)",
            );
        }
        if let Some(d) = &b.discover {
            self.err(d.span(), format!("{key}.discover"), "a backend serves files (`static`) or has servers, not both");
        }
        if mode == Mode::Tcp {
            self.err(s.span(), format!("{key}.static"), "a TCP backend cannot serve files");
        }
        if let Some(c) = &b.cache
            && !matches!(c.get_ref(), RawCacheUse::Switch(false))
        {
            self.err(
                c.span(),
                format!("{key}.cache"),
                "files are not cached (the kernel's page cache holds them); leave `cache` out of a `static` backend",
            );
        }
    }

    /// The `fallback` of each `static` table, now that every backend is known.
    pub(super) fn static_fallbacks(
        &mut self,
        pending: Vec<PendingFallback>,
        index: &HashMap<String, usize>,
        backends: &mut [Arc<Backend>],
    ) {
        for p in pending {
            let name = p.name.get_ref();
            let Some(&target) = index.get(name) else {
                self.err(p.name.span(), p.key, format!("no backend named `{name}`"));
                continue;
            };
            let t = &backends[target];
            let why = if target == p.backend {
                Some("is this backend")
            } else if t.files.is_some() {
                Some("serves files too (a fallback needs servers)")
            } else if t.forward.is_some() {
                Some("is a forward proxy (a fallback needs servers)")
            } else if t.mode != Mode::Http {
                Some("is a TCP backend")
            } else {
                None
            };
            if let Some(why) = why {
                self.err(p.name.span(), p.key, format!("backend `{name}` {why}"));
                continue;
            }
            if let Some(files) = Arc::get_mut(&mut backends[p.backend]).and_then(|b| b.files.as_mut()) {
                Arc::make_mut(files).fallback = Some(target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Coding, StaticFiles};
    use std::path::Path;

    fn load(dir: &Path, backends: &str) -> Result<crate::model::Config, String> {
        let src = format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\ndefault_backend = \"files\"\n{backends}\n\
             [[backend]]\nname = \"app\"\n  [[backend.server]]\n  name = \"a1\"\n  addr = \"127.0.0.1:81\"\n"
        );
        crate::parse(&src, &dir.join("t.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_static_backend_with_its_defaults_and_options() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("www")).unwrap();
        let c = load(dir.path(), "[[backend]]\nname = \"files\"\nstatic = { root = \"www\" }").unwrap();
        let f: &StaticFiles = c.backends[0].files.as_deref().unwrap();
        assert_eq!(f.root, dir.path().canonicalize().unwrap().join("www"), "relative to the config file");
        assert_eq!((f.index.clone(), f.fallback, f.precompressed.clone()), (vec!["index.html".into()], None, vec![]));
        assert_eq!(f.default_type, "application/octet-stream");
        assert!(c.backends[0].servers.is_empty());

        let c = load(
            dir.path(),
            "[[backend]]\nname = \"files\"\nstatic = { root = \"www\", index = [\"index.htm\", \"default.html\"], \
             fallback = \"app\", precompressed = [\"gzip\", \"br\"], types = { MD = \"text/markdown; charset=utf-8\" }, \
             default_type = \"text/plain\" }",
        )
        .unwrap();
        let f = c.backends[0].files.as_deref().unwrap();
        assert_eq!(f.index, ["index.htm", "default.html"]);
        assert_eq!(f.fallback, Some(1));
        assert_eq!(f.precompressed, [Coding::Gzip, Coding::Br]);
        assert_eq!(f.types.get("md").map(String::as_str), Some("text/markdown; charset=utf-8"));
        assert_eq!(f.default_type, "text/plain");
        let c = load(dir.path(), "[[backend]]\nname = \"files\"\nstatic = { root = \"www\", precompressed = true }")
            .unwrap();
        assert_eq!(c.backends[0].files.as_deref().unwrap().precompressed, [Coding::Br, Coding::Zstd, Coding::Gzip]);
    }

    #[test]
    fn each_mistake_at_its_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("www")).unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let e = load(
            dir.path(),
            "[[backend]]\nname = \"files\"\nstatic = { root = \"www\", index = [\"a/b\", \"..\"], fallback = \"nope\", \
             precompressed = [\"deflate\", \"br\", \"br\"], types = { \"a.b\" = \"text/x\", css = \"css\" }, default_type = \"x\" }",
        )
        .unwrap_err();
        for want in [
            "backend[0].static.index[0]: `a/b` is not a file name",
            "backend[0].static.index[1]: `..` is not a file name",
            "backend[0].static.fallback: no backend named `nope`",
            "backend[0].static.precompressed[0]: `deflate` is not a coding",
            "backend[0].static.precompressed[2]: `br` is listed twice",
            "backend[0].static.types.a.b: `a.b` is not a file extension",
            "backend[0].static.types.css: `css` is not a media type",
            "backend[0].static.default_type: `x` is not a media type",
        ] {
            assert!(e.contains(want), "{want}\n{e}");
        }
        for (backend, want) in [
            ("static = { root = \"missing\" }", "backend[0].static.root: `"),
            ("static = { root = \"file\" }", "is not a directory"),
            ("static = { root = \"www\", fallback = \"files\" }", "backend `files` is this backend"),
            (
                "static = { root = \"www\" }\n  [[backend.server]]\n  name = \"s\"\n  addr = \"127.0.0.1:82\"",
                "backend[0].static: a backend serves files (`static`) or has servers, not both",
            ),
            ("static = { root = \"www\" }\ncache = { zone = \"z\" }", "backend[0].cache: files are not cached"),
            ("mode = \"tcp\"\nstatic = { root = \"www\" }", "a TCP backend cannot serve files"),
        ] {
            let e = load(dir.path(), &format!("[[backend]]\nname = \"files\"\n{backend}")).unwrap_err();
            assert!(e.contains(want), "{want}\n{e}");
        }
        // The fallback serves files too: refused.
        let e = load(
            dir.path(),
            "[[backend]]\nname = \"files\"\nstatic = { root = \"www\", fallback = \"more\" }\n\
             [[backend]]\nname = \"more\"\nstatic = { root = \"www\" }",
        )
        .unwrap_err();
        assert!(e.contains("backend[0].static.fallback: backend `more` serves files too"), "{e}");
    }
}
