//! The command line as a user runs it.

use std::process::Command;

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_accepts_the_demo_config() {
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml");
    let out = tollgate().args(["check", "-c"]).arg(&demo).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (1 frontend(s), 1 backend(s))"));
}

#[test]
fn check_prints_every_error_with_file_line_and_key_then_exits_1() {
    let p = write(
        "bad.toml",
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\ndefault_backend = \"nodes\"\n\n\
         [[backend]]\nname = \"nodez\"\nbalance = \"roundrobin\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"127.0.0.1:3001\"\n  weight = 999\n",
    );
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = p.display().to_string();
    assert!(err.contains(&format!("{file}:4:19: frontend[0].default_backend: no backend is named `nodes`")), "{err}");
    assert!(
        err.contains(&format!("{file}:12:12: backend[0].server[0].weight: 999 is out of range (0..=256)")),
        "{err}"
    );
    assert!(err.contains("2 error(s)"), "{err}");

    // `run` refuses the same file the same way, before binding anything.
    let out = tollgate().args(["run", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not starting"));
}

#[test]
fn check_reports_toml_syntax_and_unknown_keys() {
    let p = write("syntax.toml", "[[frontend]\nname = \"web\"\n");
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{}:1:", p.display())));

    let p = write("unknown.toml", "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\nforwardfor = true\n");
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":4:1: frontend[0].forwardfor: unknown field `forwardfor`"), "{err}");
}

#[test]
fn missing_file_is_named() {
    let out = tollgate().args(["check", "-c", "/nonexistent/tollgate.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tollgate.toml: cannot read the config"));
}

#[test]
fn version() {
    let out = tollgate().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tollgate "));
}
