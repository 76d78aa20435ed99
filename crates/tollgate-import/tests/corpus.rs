//! The corpus: real-world-shaped haproxy.cfg and nginx.conf files under
//! tests/corpus/, each with the TOML `tollgate import` is to write for it
//! (`<name>.toml` beside it). Every expected TOML must load in Tollgate: the
//! files it names (certificates, error pages, directories) are made in a
//! temporary directory and its paths pointed there.
//!
//! `UPDATE_CORPUS=1 cargo test -p tollgate-import --test corpus` rewrites the
//! expected files from the importer's output (review the diff).

use std::path::{Path, PathBuf};
use tollgate_import::{Format, import_file_with};

fn corpus(format: &str, ext: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus").join(format);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// Files the configs name, made once per test.
struct Fixtures {
    dir: tempfile::TempDir,
    /// Certificate and key in one PEM file.
    combined: String,
    cert: String,
    key: String,
    certs_dir: String,
    page: String,
}

impl Fixtures {
    fn new() -> Fixtures {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["example.com".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(p("combined.pem"), format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        std::fs::write(p("cert.pem"), cert.pem()).unwrap();
        std::fs::write(p("key.pem"), key.serialize_pem()).unwrap();
        std::fs::create_dir(p("certs")).unwrap();
        std::fs::write(p("certs/site.pem"), format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        std::fs::write(p("page.html"), "<h1>error</h1>\n").unwrap();
        std::fs::create_dir(p("www")).unwrap();
        Fixtures {
            combined: p("combined.pem"),
            cert: p("cert.pem"),
            key: p("key.pem"),
            certs_dir: p("certs"),
            page: p("page.html"),
            dir,
        }
    }

    /// Points every file a config names at a fixture; drops what names
    /// system users (they need not exist here).
    fn localize(&self, v: &mut toml::Value, key: &str) {
        match v {
            toml::Value::Table(t) => {
                let has_key = t.contains_key("key");
                for name in ["user", "group"] {
                    t.remove(name);
                }
                t.remove("crl");
                for (k, v) in t.iter_mut() {
                    match (k.as_str(), v) {
                        ("certs", toml::Value::Array(items)) => {
                            for i in items {
                                let dir = i.as_str().is_some_and(|s| s.ends_with('/'));
                                *i = toml::Value::String(if dir {
                                    self.certs_dir.clone()
                                } else if has_key {
                                    self.cert.clone()
                                } else {
                                    self.combined.clone()
                                });
                            }
                        }
                        ("key", v @ toml::Value::String(_)) if key == "tls" => {
                            *v = toml::Value::String(self.key.clone())
                        }
                        ("cert", v @ toml::Value::String(_)) if key == "tls" => {
                            *v = toml::Value::String(self.combined.clone())
                        }
                        ("ca" | "client_ca", v @ toml::Value::String(_)) if key == "tls" => {
                            *v = toml::Value::String(self.cert.clone())
                        }
                        ("root", v @ toml::Value::String(_)) => {
                            *v = toml::Value::String(self.dir.path().join("www").display().to_string())
                        }
                        ("path", v @ toml::Value::String(_)) if matches!(key, "disk" | "socket") => {
                            *v = toml::Value::String(self.dir.path().join(format!("{key}-path")).display().to_string())
                        }
                        ("pidfile", v) => *v = toml::Value::String(self.dir.path().join("pid").display().to_string()),
                        ("access_log", v) if v.as_str().is_some_and(|s| s.starts_with('/')) => {
                            *v = toml::Value::String(self.dir.path().join("access.log").display().to_string())
                        }
                        ("error_pages", toml::Value::Table(pages)) => {
                            for (_, p) in pages.iter_mut() {
                                *p = toml::Value::String(self.page.clone());
                            }
                        }
                        (k, v) => self.localize(v, k),
                    }
                }
            }
            toml::Value::Array(items) => {
                for i in items {
                    self.localize(i, key);
                }
            }
            _ => {}
        }
    }
}

fn run(format: Format, dir: &str, ext: &str) {
    let files = corpus(dir, ext);
    assert!(files.len() >= 20, "{} {dir} configs in the corpus: at least 20 wanted", files.len());
    let update = std::env::var_os("UPDATE_CORPUS").is_some();
    let fixtures = Fixtures::new();
    let empty_root = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for file in &files {
        // Absolute paths (/etc/nginx/mime.types, ...) are read under an
        // empty root: the output does not depend on this machine's files.
        let imported =
            import_file_with(file, Some(format), Some(empty_root.path()), &|_| None).unwrap_or_else(|e| panic!("{e}"));
        assert!(imported.usable, "{}: nothing usable", file.display());
        let expected_path = file.with_extension("toml");
        if update {
            std::fs::write(&expected_path, &imported.toml).unwrap();
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_CORPUS=1 writes it)", expected_path.display()));
        if expected != imported.toml {
            failures.push(format!("{}: the output differs from {}", file.display(), expected_path.display()));
            continue;
        }
        let mut value: toml::Value =
            toml::from_str(&expected).unwrap_or_else(|e| panic!("{}: not TOML: {e}", expected_path.display()));
        fixtures.localize(&mut value, "");
        let text = toml::to_string(&value).unwrap();
        let at = fixtures.dir.path().join(expected_path.file_name().unwrap());
        if let Err(e) = tollgate_config::parse(&text, &at) {
            failures
                .push(format!("{}: tollgate check refuses it:\n{e}\n--- as checked:\n{text}", expected_path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn haproxy_corpus_translates_as_expected_and_loads() {
    run(Format::Haproxy, "haproxy", "cfg");
}

#[test]
fn nginx_corpus_translates_as_expected_and_loads() {
    run(Format::Nginx, "nginx", "conf");
}
