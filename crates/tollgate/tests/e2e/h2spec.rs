//! h2spec, the HTTP/2 conformance suite (RFC 7540/9113 and HPACK; 146 cases with
//! `--strict`, which adds the SHOULDs),
//! against Tollgate over h2c with prior knowledge and over TLS with ALPN.
//!
//! h2spec is a Go program: `.ci/run` installs it with `go install`. Without it
//! the test is skipped, except under CI (`CI` set), where its absence fails.

use crate::cdp::{in_ci, is_executable};
use crate::harness::*;
use crate::tls::{Pki, tls_bind};
use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use std::path::PathBuf;
use std::process::Command;

/// `$TOLLGATE_H2SPEC`, else `h2spec` on `PATH`, else in Go's install folder
/// (`$GOBIN`, `$GOPATH/bin`, `~/go/bin`).
fn find_h2spec() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TOLLGATE_H2SPEC").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(is_executable(&p), "TOLLGATE_H2SPEC={} is not an executable file", p.display());
        return Some(p);
    }
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    dirs.extend(std::env::var_os("GOBIN").map(PathBuf::from));
    dirs.extend(std::env::var_os("GOPATH").map(|p| PathBuf::from(p).join("bin")));
    dirs.extend(std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/bin")));
    dirs.into_iter().map(|d| d.join("h2spec")).find(|p| is_executable(p))
}

/// The counts of h2spec's closing line, `N tests, P passed, S skipped, F failed`.
fn summary(out: &str) -> Option<(u32, u32, u32, u32)> {
    let line = out.lines().rev().find(|l| l.contains(" tests, ") && l.contains(" failed"))?;
    let n: Vec<u32> = line.split(", ").filter_map(|part| part.trim().split(' ').next()?.parse().ok()).collect();
    match n[..] {
        [tests, passed, skipped, failed] => Some((tests, passed, skipped, failed)),
        _ => None,
    }
}

#[test]
fn h2spec_summary_is_read() {
    let out = "Hypertext Transfer Protocol Version 2 (HTTP/2)\n...\nFinished in 3.2 seconds\n146 tests, 140 passed, 1 skipped, 5 failed\n";
    assert_eq!(summary(out), Some((146, 140, 1, 5)));
    assert_eq!(summary("no summary"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_every_case_over_h2c_and_tls() {
    let Some(bin) = find_h2spec() else {
        assert!(
            !in_ci(),
            "h2spec not found ($TOLLGATE_H2SPEC, PATH, $GOBIN, $GOPATH/bin, ~/go/bin), and CI is set: \
             .ci/run installs it with `go install github.com/summerwind/h2spec/cmd/h2spec@latest`"
        );
        eprintln!("h2spec not installed: skipped (go install github.com/summerwind/h2spec/cmd/h2spec@latest)");
        return;
    };
    let origin = serve(|_req| async { Response::new(Full::new(Bytes::from_static(b"hello from the origin\n"))) }).await;
    let pki = Pki::new("h2spec");
    let (_, file) = pki.leaf("h2spec.pem", &["localhost"], false);
    let toml = format!(
        "[[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", h2c = true }}, {}]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s1\"\naddr = \"{}\"\n",
        tls_bind(2, &[&file], ""),
        origin.addr
    );
    let p = proxy(&toml);
    let addrs = p.addrs();
    let mut failures = Vec::new();
    for (addr, tls) in [(addrs[0].1, false), (addrs[1].1, true)] {
        let mut cmd = Command::new(&bin);
        cmd.args(["-S", "-h", &addr.ip().to_string(), "-p", &addr.port().to_string(), "-o", "3"]);
        if tls {
            cmd.args(["-t", "-k"]);
        }
        let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().expect("h2spec runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (tests, passed, skipped, failed) = summary(&text)
            .unwrap_or_else(|| panic!("no h2spec summary:\n{text}\n{}", String::from_utf8_lossy(&out.stderr)));
        let over = if tls { "TLS" } else { "h2c" };
        eprintln!("h2spec over {over}: {tests} tests, {passed} passed, {skipped} skipped, {failed} failed");
        assert!(tests >= 140, "h2spec ran {tests} cases over {over}");
        if failed > 0 || skipped > 0 {
            let tail = text.lines().skip_while(|l| !l.starts_with("Failures:")).collect::<Vec<_>>().join("\n");
            eprintln!("{tail}");
            failures.push(format!("over {over}: {failed} failed, {skipped} skipped\n{tail}"));
        }
    }
    assert!(failures.is_empty(), "h2spec:\n{}", failures.join("\n"));
}
