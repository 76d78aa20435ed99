use super::*;

// The corpus (tests/corpus/nginx) is translated, compared and loaded by
// tests/corpus.rs.

fn parse_str(text: &str) -> Result<Vec<parse::Directive>, Error> {
    parse::Parser::new(Path::new("/nonexistent/nginx.conf"), None).parse(text, Path::new("/nonexistent/nginx.conf"))
}

fn run(text: &str) -> (toml::Value, Vec<Warning>, String) {
    run_at(text, Path::new("/nonexistent/nginx.conf"))
}

fn run_at(text: &str, path: &Path) -> (toml::Value, Vec<Warning>, String) {
    let (out, w) = translate(text, path, None).unwrap_or_else(|e| panic!("{e}"));
    let t = out.render();
    let v = toml::from_str::<toml::Value>(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
    (v, w, t)
}

fn syntax_line(r: Result<Vec<parse::Directive>, Error>) -> (usize, String) {
    match r {
        Err(Error::Syntax { pos, message }) => (pos.line, message),
        other => panic!("not a syntax error: {other:?}"),
    }
}

#[test]
fn tokenizer_quotes_comments_escapes_and_variables() {
    let t = "# a comment\nhttp { # another\n  add_header X-A \"a b;{c}\" always;\n  add_header 'X-B' 'it\\'s';\n  \
             set $x ${host}x;\n  location ~ ^/a\\.b$ { return 200 \"l1\\nl2\"; }\n}\n";
    let tree = parse_str(t).unwrap();
    assert_eq!(tree.len(), 1);
    let http = &tree[0];
    assert_eq!((http.name.as_str(), http.pos.line), ("http", 2));
    let kids = http.children();
    assert_eq!(kids[0].args, vec!["X-A", "a b;{c}", "always"]);
    assert_eq!(kids[0].pos.line, 3);
    assert_eq!(kids[1].args, vec!["X-B", "it's"]);
    assert_eq!(kids[2].args, vec!["$x", "${host}x"]);
    assert_eq!(kids[3].args, vec!["~", "^/a\\.b$"]);
    assert_eq!(kids[3].children()[0].args, vec!["200", "l1\nl2"]);
    assert_eq!(kids[3].children()[0].pos.line, 6);
    assert_eq!(kids[0].text(), "add_header X-A \"a b;{c}\" always");
}

#[test]
fn tokenizer_errors_have_lines() {
    assert_eq!(syntax_line(parse_str("http {\n server {\n listen 80;\n }\n")).0, 1);
    assert_eq!(syntax_line(parse_str("events {}\n}\n")).0, 2);
    let (line, msg) = syntax_line(parse_str("a b;\nc \"open\n\nd;\n"));
    assert_eq!(line, 2);
    assert!(msg.contains("unterminated"), "{msg}");
    assert_eq!(syntax_line(parse_str("a b;\nc d\n")).0, 2);
    assert_eq!(syntax_line(parse_str("a;\n{ b; }\n")).0, 2);
    // Deep nesting is refused, not a stack overflow.
    let deep = "a {".repeat(200) + &"}".repeat(200);
    assert!(parse_str(&deep).is_err());
    // No panic on odd input.
    for t in ["\\", "\"\\", "${", "a ${b", "}", "{", ";;;", "'", "a '\\'", "\u{0}{"] {
        let _ = parse_str(t);
        let _ = translate(t, Path::new("x.conf"), None);
    }
}

#[test]
fn includes_glob_depth_and_missing() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::create_dir(p("conf.d")).unwrap();
    std::fs::write(p("conf.d/b.conf"), "upstream b { server 10.0.0.2:80; }\n").unwrap();
    std::fs::write(p("conf.d/a.conf"), "upstream a {\n server 10.0.0.1:80;\n}\n").unwrap();
    std::fs::write(p("main.conf"), "http {\n include conf.d/*.conf;\n include /nonexistent/mime.types;\n}\n").unwrap();
    let text = std::fs::read_to_string(p("main.conf")).unwrap();
    let tree = parse::Parser::new(&p("main.conf"), None).parse(&text, &p("main.conf")).unwrap();
    let kids = tree[0].children();
    assert_eq!(kids.len(), 3);
    assert_eq!((kids[0].arg(0), kids[0].pos.line), ("a", 1));
    assert!(kids[0].pos.file.ends_with("conf.d/a.conf"));
    assert_eq!(kids[0].children()[0].pos.line, 2);
    assert_eq!(kids[1].arg(0), "b");
    assert!(kids[2].unresolved.as_deref().is_some_and(|u| u.contains("cannot read")));
    let (v, w, _) = run_at(&text, &p("main.conf"));
    assert_eq!(v["backend"].as_array().map(Vec::len), Some(2));
    assert!(
        w.iter().any(|w| w.kind == Kind::NoEquivalent && w.message.contains("cannot read /nonexistent/mime.types"))
    );
    // A file that includes itself.
    std::fs::write(p("loop.conf"), "include loop.conf;\n").unwrap();
    let (_, msg) =
        syntax_line(parse::Parser::new(&p("loop.conf"), None).parse("include loop.conf;\n", &p("loop.conf")));
    assert!(msg.contains("deeper than 16"), "{msg}");
}

#[test]
fn types_block_is_one_note() {
    let (_, w, _) = run("http {\n types {\n text/html html;\n text/css css;\n }\n server { listen 80; }\n}\n");
    assert_eq!(w.iter().filter(|w| w.directive.starts_with("types")).count(), 1);
    assert!(!w.iter().any(|w| w.directive.starts_with("text/")));
}

fn rules(v: &toml::Value, f: usize) -> Vec<toml::Value> {
    v["frontend"][f].get("rule").and_then(|r| r.as_array()).cloned().unwrap_or_default()
}

#[test]
fn locations_in_nginx_order() {
    let (v, _, t) = run("server {\n listen 80;\n location / { proxy_pass http://127.0.0.1:1; }\n \
         location /a/ { proxy_pass http://127.0.0.1:2; }\n location ~* \\.png$ { proxy_pass http://127.0.0.1:3; }\n \
         location ^~ /a/b/ { proxy_pass http://127.0.0.1:4; }\n location ^~ /s/ { proxy_pass http://127.0.0.1:5; }\n \
         location /s/long/ { proxy_pass http://127.0.0.1:6; }\n location = /x { proxy_pass http://127.0.0.1:7; }\n \
         location ~ ^/r { proxy_pass http://127.0.0.1:8; }\n}\n");
    let r = rules(&v, 0);
    let backends: Vec<&str> = r.iter().map(|r| r["backend"].as_str().unwrap()).collect();
    assert_eq!(
        backends,
        ["127.0.0.1_7", "127.0.0.1_4", "127.0.0.1_5", "127.0.0.1_3", "127.0.0.1_8", "127.0.0.1_6", "127.0.0.1_2"],
        "{t}"
    );
    assert_eq!(r[0]["when"]["path"].as_str(), Some("/x"));
    assert_eq!(r[2]["when"]["path_prefix"].as_str(), Some("/s/"));
    assert_eq!(r[2]["when"]["not"]["path_prefix"].as_str(), Some("/s/long/"));
    assert_eq!(r[3]["when"]["path_regex"].as_str(), Some("(?i)\\.png$"));
    assert_eq!(v["frontend"][0]["default_backend"].as_str(), Some("127.0.0.1_1"));
}

#[test]
fn redirect_forms() {
    let (v, w, t) = run(
        "server { listen 80; server_name a.example;\n location /1 { return 301 https://$host$request_uri; }\n \
         location /2 { return 302 https://example.com$request_uri; }\n location /3 { return 308 https://example.com/x; }\n \
         location /4 { return 403 \"no\"; }\n location /5 { return 444; }\n location /6 { return 200 ok; }\n \
         location /7 { rewrite ^(.*)$ https://$host$1 permanent; }\n location /8 { rewrite ^/old$ /new redirect; }\n \
         location /9 { return 301 https://$server_name$request_uri; }\n}\n",
    );
    let r = rules(&v, 0);
    let find = |p: &str| r.iter().find(|r| r["when"].get("path_prefix").and_then(|x| x.as_str()) == Some(p)).cloned();
    let red = |p: &str| find(p).unwrap_or_else(|| panic!("{p}\n{t}"))["redirect"].clone();
    assert_eq!(red("/1")["scheme"].as_str(), Some("https"));
    assert_eq!(red("/1")["code"].as_integer(), Some(301));
    assert_eq!(red("/2")["prefix"].as_str(), Some("https://example.com"));
    assert_eq!(red("/3")["location"].as_str(), Some("https://example.com/x"));
    assert_eq!(find("/4").unwrap()["deny"]["body"].as_str(), Some("no"));
    assert_eq!(find("/5").unwrap()["silent_drop"].as_bool(), Some(true));
    assert!(find("/6").is_none());
    assert!(w.iter().any(|w| w.directive == "return 200 ok" && w.kind == Kind::NoEquivalent));
    assert_eq!(red("/7")["scheme"].as_str(), Some("https"));
    let eight = r.iter().find(|r| r["when"].to_string().contains("^/old$")).unwrap();
    assert_eq!(eight["redirect"]["location"].as_str(), Some("/new"));
    assert_eq!(red("/9")["prefix"].as_str(), Some("https://a.example"));
}

#[test]
fn upstream_options() {
    let (v, w, t) = run("upstream app {\n least_conn;\n server 10.0.0.1:8080 weight=3 max_conns=50;\n \
         server 10.0.0.2 backup;\n server 10.0.0.3:8080 down max_fails=2 fail_timeout=20s;\n \
         server unix:/run/app.sock;\n keepalive 16;\n}\nupstream h { hash $request_uri consistent; server b.internal:81; }\n\
         server { listen 80; location / { proxy_pass http://app; } location /h { proxy_pass https://h; } }\n");
    let b = &v["backend"][0];
    assert_eq!(b["name"].as_str(), Some("app"));
    assert_eq!(b["balance"].as_str(), Some("leastconn"));
    assert_eq!(b["observe"]["errors"].as_integer(), Some(2), "{t}");
    assert_eq!(b["check"]["interval"].as_str(), Some("20s"));
    let s = b["server"].as_array().unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s[0]["addr"].as_str(), Some("10.0.0.1:8080"));
    assert_eq!(s[0]["weight"].as_integer(), Some(3));
    assert_eq!(s[0]["maxconn"].as_integer(), Some(50));
    assert_eq!(s[1]["addr"].as_str(), Some("10.0.0.2:80"));
    assert_eq!(s[1]["backup"].as_bool(), Some(true));
    assert_eq!(s[2]["disabled"].as_bool(), Some(true));
    assert!(w.iter().any(|w| w.directive.starts_with("server unix:") && w.kind == Kind::NoEquivalent));
    assert!(w.iter().any(|w| w.directive == "keepalive 16"));
    let h = &v["backend"][1];
    assert_eq!(h["balance"].as_str(), Some("uri"));
    assert_eq!(h["tls"]["verify"].as_str(), Some("none"));
    assert!(w.iter().any(|w| w.directive.starts_with("hash") && w.kind == Kind::Approximate));
}

#[test]
fn hosts_access_auth_and_rate_limits() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("htpasswd");
    std::fs::write(
        &pw,
        "alice:$2y$10$YvT8Lo63IUPQUxQJdJZGQ.DqPQ61kdMD57n2weCMVQ3gzxYgj7CH.\nbob:$apr1$abc$def\ncarol:{PLAIN}pw\n",
    )
    .unwrap();
    let text = format!(
        "http {{\n limit_req_zone $binary_remote_addr zone=api:10m rate=10r/s;\n \
         server {{ listen 80 default_server; server_name _; return 404; }}\n \
         server {{ listen 80; server_name .example.com;\n  location /admin/ {{ allow 10.0.0.0/8; deny all; \
         auth_basic \"Admins\"; auth_basic_user_file {}; proxy_pass http://127.0.0.1:9; }}\n  \
         location /api/ {{ limit_req zone=api burst=5; proxy_pass http://127.0.0.1:9; }}\n }}\n}}\n",
        pw.display()
    );
    let (v, w, t) = run(&text);
    let f = &v["frontend"][0];
    assert_eq!(f["track"].as_array().map(Vec::len), Some(1), "{t}");
    let r = rules(&v, 0);
    let hosts = toml::Value::Array(vec!["example.com".into(), "*.example.com".into()]);
    assert_eq!(r[0]["when"]["host"], hosts);
    assert_eq!(r[0]["when"]["not"]["src"].as_str(), Some("10.0.0.0/8"));
    assert_eq!(r[0]["deny"].as_integer(), Some(403));
    assert_eq!(r[1]["auth"]["userlist"].as_str(), Some("htpasswd"));
    assert_eq!(r[1]["auth"]["realm"].as_str(), Some("Admins"));
    assert_eq!(r[2]["when"]["counter"]["above"].as_integer(), Some(15));
    assert_eq!(r[2]["deny"].as_integer(), Some(503));
    // The server's catch-all, then the default server's return, last and unconditioned.
    let last = r.last().unwrap();
    assert!(last.get("when").is_none());
    assert_eq!(last["deny"].as_integer(), Some(404));
    let users = v["userlist"][0]["users"].as_array().unwrap();
    assert_eq!(users.len(), 2);
    assert_eq!(users[1]["insecure_password"].as_str(), Some("pw"));
    assert!(w.iter().any(|w| w.message.contains("user bob")));
    assert_eq!(v["table"][0]["period"].as_str(), Some("1s"));
}

#[test]
fn unreadable_htpasswd_is_reported_and_the_location_closed() {
    let (v, w, _) = run("server { listen 80; location / { auth_basic on; auth_basic_user_file /nonexistent/pw; \
                         proxy_pass http://127.0.0.1:1; } }\n");
    assert!(v.get("userlist").is_none());
    assert!(w.iter().any(|w| w.kind == Kind::NoEquivalent && w.message.contains("answers 403")));
    // Never open: the location that asked for a password is denied.
    let rules = v["frontend"][0]["rule"].as_array().unwrap();
    assert!(rules.iter().all(|r| r.get("backend").is_none()), "{rules:?}");
    assert!(rules.iter().any(|r| r["deny"]["status"].as_integer() == Some(403)), "{rules:?}");
}

#[test]
fn stream_and_tls() {
    let (v, _, t) = run("stream { upstream pg { server 10.0.0.5:5432; } server { listen 5432; proxy_pass pg; \
                         proxy_timeout 1h; } }\nhttp { server { listen 443 ssl; server_name a.example; \
                         ssl_certificate /c/a.pem; ssl_certificate_key /c/a.key; ssl_protocols TLSv1.3; \
                         ssl_session_tickets off; location / { proxy_pass http://127.0.0.1:1; } }\n \
                         server { listen 443 ssl; server_name b.example; ssl_certificate /c/b.pem; \
                         ssl_certificate_key /c/b.pem.key; location / { return 403; } } }\n");
    let tcp = v["frontend"].as_array().unwrap().iter().find(|f| f.get("mode").is_some()).unwrap().clone();
    assert_eq!(tcp["bind"][0].as_str(), Some(":5432"));
    assert_eq!(tcp["default_backend"].as_str(), Some("pg"));
    let pg = v["backend"].as_array().unwrap().iter().find(|b| b["name"].as_str() == Some("pg")).unwrap().clone();
    assert_eq!(pg["timeout"]["tunnel"].as_str(), Some("1h"), "{t}");
    let web = v["frontend"].as_array().unwrap().iter().find(|f| f.get("mode").is_none()).unwrap().clone();
    let tls = &web["bind"][0]["tls"];
    assert_eq!(tls["certs"].as_array().map(Vec::len), Some(2));
    assert!(tls.get("key").is_none());
    assert_eq!(tls["min_version"].as_str(), Some("1.3"));
    assert_eq!(tls["tickets"].as_bool(), Some(false));
}

#[test]
fn unknown_directives_are_reported_with_lines() {
    let (_, w, t) = run("http {\n frobnicate on;\n server {\n listen 80;\n location / {\n wibble 1;\n } } }\n");
    let unknown: Vec<(usize, &str)> =
        w.iter().filter(|w| w.kind == Kind::Unknown).map(|w| (w.pos.line, w.directive.as_str())).collect();
    assert_eq!(unknown, [(2, "frobnicate on"), (6, "wibble 1")]);
    assert!(t.contains("UNKNOWN nginx.conf:2: frobnicate on"));
}

#[test]
fn header_values() {
    assert_eq!(location_map("$remote_addr:$remote_port"), Ok("${client_ip}:${client_port}".into()));
    assert_eq!(location_map("a $ b"), Ok("a $ b".into()));
    assert_eq!(location_map("$foo"), Err("$foo".into()));
    assert_eq!(location_map("${scheme}://x"), Ok("${scheme}://x".into()));
}

fn location_map(v: &str) -> Result<String, String> {
    rewrite::map_vars(v)
}

#[test]
fn a_hash_on_a_header_is_translated_without_a_warning() {
    let (v, w, _) = run("upstream app { hash $http_x_user; server 10.0.0.1:80; }\n\
                         server { listen 80; location / { proxy_pass http://app; } }\n");
    assert_eq!(v["backend"][0]["balance"].as_str(), Some("hdr(X-User)"));
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn internal_rewrites_become_rewrite_path() {
    let (v, w, _) = run("server { listen 80;\n\
                         location /app/ { rewrite ^/app/(.*)$ /$1x break; proxy_pass http://127.0.0.1:1; }\n\
                         location /old/ { rewrite ^/old/(.*)$ /new/$1 last; proxy_pass http://127.0.0.1:1/ignored/; }\n\
                         location /q/ { rewrite ^/q/(.*)$ /p?a=$1 break; proxy_pass http://127.0.0.1:1; } }\n");
    let rules = v["frontend"][0]["rule"].as_array().unwrap();
    let rw = |p: &str| {
        rules.iter().find(|r| r["when"]["path_prefix"].as_str() == Some(p)).and_then(|r| r.get("rewrite_path")).cloned()
    };
    assert_eq!(rw("/app/").unwrap()["to"].as_str(), Some("/${1}x"));
    assert_eq!(rw("/old/").unwrap()["to"].as_str(), Some("/new/${1}"), "the rewrite wins over proxy_pass's URI");
    assert!(rw("/q/").is_none());
    assert!(
        w.iter().any(|w| w.kind == Kind::Approximate && w.message.contains("looks for the location again")),
        "{w:?}"
    );
    assert!(w.iter().any(|w| w.kind == Kind::NoEquivalent && w.message.contains("query string")), "{w:?}");
}

// A small evaluator of the rules written, for the tests below: which rule
// answers a request, and the `auth`s on the way (section 6.1 of the manual).

struct Req<'a> {
    host: &'a str,
    method: &'a str,
    path: &'a str,
    headers: &'a [(&'a str, &'a str)],
}

fn req<'a>(host: &'a str, method: &'a str, path: &'a str, headers: &'a [(&'a str, &'a str)]) -> Req<'a> {
    Req { host, method, path, headers }
}

fn strs(v: &toml::Value) -> Vec<String> {
    match v {
        toml::Value::String(s) => vec![s.clone()],
        toml::Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        _ => panic!("not a string or a list: {v}"),
    }
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(rest) => host.ends_with(rest),
        None => pattern == host,
    }
}

/// Whether a `when` matches; the client is 192.0.2.1 on a plain bind.
fn matches(c: &toml::Value, r: &Req) -> bool {
    let t = c.as_table().unwrap_or_else(|| panic!("not a table: {c}"));
    t.iter().all(|(k, v)| match k.as_str() {
        "host" => strs(v).iter().any(|p| host_matches(p, r.host)),
        "method" => strs(v).iter().any(|m| m == r.method),
        "path" => strs(v).iter().any(|p| p == r.path),
        "path_prefix" => strs(v).iter().any(|p| r.path.starts_with(p.as_str())),
        "path_regex" => strs(v).iter().any(|re| regex::Regex::new(re).unwrap().is_match(r.path)),
        "tls" => v.as_bool() == Some(false),
        "src" => false,
        "header" => {
            let name = v["name"].as_str().unwrap();
            let lines: Vec<&str> = std::iter::once(("Host", r.host))
                .chain(r.headers.iter().copied())
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
                .collect();
            if let Some(p) = v.get("present") {
                p.as_bool() == Some(!lines.is_empty())
            } else if let Some(e) = v.get("equals") {
                lines.iter().any(|l| Some(*l) == e.as_str())
            } else {
                let re = regex::Regex::new(v["regex"].as_str().unwrap()).unwrap();
                lines.iter().any(|l| re.is_match(l))
            }
        }
        "not" => !matches(v, r),
        "any" => v.as_array().unwrap().iter().any(|c| matches(c, r)),
        "all" => v.as_array().unwrap().iter().all(|c| matches(c, r)),
        other => panic!("a condition the test does not evaluate: {other}"),
    })
}

/// What answers the request: `backend NAME`, `redirect`, `deny STATUS` or
/// `silent_drop`, with the userlists asked for on the way.
fn route(v: &toml::Value, f: usize, r: &Req) -> (String, Vec<String>) {
    let mut auths = Vec::new();
    for rule in rules(v, f) {
        if rule.get("when").is_some_and(|w| !matches(w, r)) {
            continue;
        }
        if let Some(a) = rule.get("auth") {
            auths.push(a["userlist"].as_str().unwrap().to_string());
        }
        if let Some(b) = rule.get("backend") {
            return (format!("backend {}", b.as_str().unwrap()), auths);
        }
        if rule.get("redirect").is_some() {
            return ("redirect".into(), auths);
        }
        if let Some(d) = rule.get("deny") {
            let status = d.as_integer().or_else(|| d.get("status").and_then(|s| s.as_integer())).unwrap();
            return (format!("deny {status}"), auths);
        }
        if rule.get("silent_drop").is_some() {
            return ("silent_drop".into(), auths);
        }
    }
    match v["frontend"][f].get("default_backend") {
        Some(b) => (format!("backend {}", b.as_str().unwrap()), auths),
        None => ("503".into(), auths),
    }
}

/// What `tollgate check` says of the output.
fn loads(t: &str) {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join("out.toml");
    if let Err(e) = tollgate_config::parse_offline(t, &at) {
        panic!("tollgate check refuses it:\n{e}\n{t}");
    }
}

fn htpasswd(dir: &Path) -> String {
    let pw = dir.join("htpasswd");
    std::fs::write(&pw, "alice:$2y$10$YvT8Lo63IUPQUxQJdJZGQ.DqPQ61kdMD57n2weCMVQ3gzxYgj7CH.\n").unwrap();
    pw.display().to_string()
}

#[test]
fn server_names_go_by_nginx_precedence() {
    let pass = |n: u8| format!("location / {{ proxy_pass http://127.0.0.1:{n}; }}");
    let text = format!(
        "server {{ listen 80 default_server; return 444; }}\n\
         server {{ listen 80; server_name *.example.com; {} }}\n\
         server {{ listen 80; server_name www.example.com; {} }}\n\
         server {{ listen 80; server_name ~^(?<sub>.+)\\.example\\.org$; {} }}\n\
         server {{ listen 80; server_name shop.example.org a.test *.b.test; {} }}\n\
         server {{ listen 80; server_name mail.*; {} }}\n\
         server {{ listen 80; server_name x.b.test; {} }}\n\
         server {{ listen 80; server_name *.example.net; {} }}\n\
         server {{ listen 80; server_name www.example.com; {} }}\n\
         server {{ listen 80; server_name .example.info; {} }}\n\
         server {{ listen 80; server_name *.www.example.info; {} }}\n",
        pass(1),
        pass(2),
        pass(3),
        pass(4),
        pass(5),
        pass(6),
        pass(7),
        pass(8),
        pass(9),
        pass(10)
    );
    let (v, w, t) = run(&text);
    loads(&t);
    let to = |host: &str| route(&v, 0, &req(host, "GET", "/", &[])).0;
    let be = |n: u8| format!("backend 127.0.0.1_{n}");
    // An exact name before a wildcard written first.
    assert_eq!(to("www.example.com"), be(2), "{t}");
    assert_eq!(to("a.example.com"), be(1), "{t}");
    // An exact name before a regex written first.
    assert_eq!(to("shop.example.org"), be(4), "{t}");
    assert_eq!(to("foo.example.org"), be(3), "{t}");
    // A block whose best name is exact, but whose wildcard loses to a later
    // block's exact name.
    assert_eq!(to("x.b.test"), be(6), "{t}");
    assert_eq!(to("y.b.test"), be(4), "{t}");
    assert_eq!(to("a.test"), be(4), "{t}");
    // `mail.*` takes every host starting with mail., after `*.` wildcards.
    assert_eq!(to("mail.example.co.uk"), be(5), "{t}");
    assert_eq!(to("mail.example.net"), be(7), "{t}");
    // `.example.info` is example.info and its subdomains; the longer
    // wildcard wins.
    assert_eq!(to("example.info"), be(9), "{t}");
    assert_eq!(to("a.example.info"), be(9), "{t}");
    assert_eq!(to("a.www.example.info"), be(10), "{t}");
    assert_eq!(to("other.test"), "silent_drop", "{t}");
    // A name a block written earlier has already: nginx ignores it.
    assert!(w.iter().any(|w| w.message.contains("conflicting server name")), "{w:?}");
    // The default block's names count too: its rules come last.
    let (v2, _, t2) = run("server { listen 80 default_server; server_name www.example.com; \
         location / { proxy_pass http://127.0.0.1:1; } }\n\
         server { listen 80; server_name *.example.com; location / { proxy_pass http://127.0.0.1:2; } }\n");
    loads(&t2);
    assert_eq!(route(&v2, 0, &req("www.example.com", "GET", "/", &[])).0, be(1), "{t2}");
    assert_eq!(route(&v2, 0, &req("a.example.com", "GET", "/", &[])).0, be(2), "{t2}");
    // The blocks' rules in nginx's order: the exact names first.
    let first = rules(&v, 0)[0]["when"]["host"].clone();
    assert!(strs(&first).contains(&"www.example.com".to_string()), "{t}");
}

#[test]
fn if_on_an_empty_header_matches_a_missing_one() {
    let (v, _, t) = run("server { listen 80;\n\
         if ($http_x_token = \"\") { return 401; }\n\
         if ($http_x_mode != \"\") { return 302 https://m.example/; }\n\
         if ($http_x_re ~ \"^(a|)$\") { return 403; }\n\
         if ($http_x_debug) { return 404; }\n\
         location / { proxy_pass http://127.0.0.1:1; } }\n");
    loads(&t);
    let to = |h: &[(&str, &str)]| route(&v, 0, &req("a.test", "GET", "/", h)).0;
    assert_eq!(to(&[]), "deny 401", "{t}");
    assert_eq!(to(&[("X-Token", "")]), "deny 401", "{t}");
    assert_eq!(to(&[("X-Token", "t"), ("X-Re", "b")]), "backend 127.0.0.1_1", "{t}");
    assert_eq!(to(&[("X-Token", "t"), ("X-Mode", ""), ("X-Re", "b")]), "backend 127.0.0.1_1", "{t}");
    assert_eq!(to(&[("X-Token", "t"), ("X-Mode", "m"), ("X-Re", "b")]), "redirect", "{t}");
    assert_eq!(to(&[("X-Token", "t"), ("X-Re", "a")]), "deny 403", "{t}");
    // A regex the empty value matches matches a missing header.
    assert_eq!(to(&[("X-Token", "t")]), "deny 403", "{t}");
    // `if ($http_x)`: neither empty nor "0".
    assert_eq!(to(&[("X-Token", "t"), ("X-Re", "b"), ("X-Debug", "0")]), "backend 127.0.0.1_1", "{t}");
    assert_eq!(to(&[("X-Token", "t"), ("X-Re", "b"), ("X-Debug", "")]), "backend 127.0.0.1_1", "{t}");
    assert_eq!(to(&[("X-Token", "t"), ("X-Re", "b"), ("X-Debug", "1")]), "deny 404", "{t}");
}

#[test]
fn limit_except_asks_for_the_password_or_closes() {
    let dir = tempfile::tempdir().unwrap();
    let pw = htpasswd(dir.path());
    let text = format!(
        "server {{ listen 80;\n\
         location /api/ {{ limit_except GET {{ auth_basic \"Writers\"; auth_basic_user_file {pw}; }} proxy_pass http://127.0.0.1:1; }}\n\
         location /bad/ {{ limit_except GET POST {{ auth_basic \"x\"; auth_basic_user_file /nonexistent/pw; }} proxy_pass http://127.0.0.1:2; }}\n\
         location /acl/ {{ limit_except GET {{ allow 10.0.0.0/8; deny all; }} proxy_pass http://127.0.0.1:3; }}\n\
         location /inh/ {{ auth_basic_user_file {pw}; limit_except GET {{ auth_basic \"Inherited\"; }} proxy_pass http://127.0.0.1:4; }}\n\
         location /nofile/ {{ limit_except GET {{ auth_basic \"x\"; }} proxy_pass http://127.0.0.1:5; }}\n\
         location /req/ {{ limit_except GET {{ auth_request /auth; }} proxy_pass http://127.0.0.1:6; }}\n}}\n"
    );
    let (v, _, t) = run(&text);
    loads(&t);
    let to = |m: &str, p: &str| route(&v, 0, &req("a.test", m, p, &[]));
    let open = |n: u8| (format!("backend 127.0.0.1_{n}"), Vec::<String>::new());
    let asked = |n: u8| (format!("backend 127.0.0.1_{n}"), vec!["htpasswd".to_string()]);
    assert_eq!(to("GET", "/api/x"), open(1), "{t}");
    assert_eq!(to("HEAD", "/api/x"), open(1), "{t}");
    assert_eq!(to("POST", "/api/x"), asked(1), "{t}");
    assert_eq!(to("DELETE", "/api/x"), asked(1), "{t}");
    let api = rules(&v, 0).into_iter().find(|r| r.get("auth").is_some()).unwrap();
    assert_eq!(api["auth"]["realm"].as_str(), Some("Writers"));
    // No userlist: the other methods are refused, never left open.
    assert_eq!(to("GET", "/bad/x"), open(2), "{t}");
    assert_eq!(to("POST", "/bad/x"), open(2), "{t}");
    assert_eq!(to("PUT", "/bad/x").0, "deny 403", "{t}");
    assert_eq!(to("PUT", "/nofile/x").0, "deny 403", "{t}");
    assert_eq!(to("PUT", "/req/x").0, "deny 403", "{t}");
    assert_eq!(to("GET", "/req/x"), open(6), "{t}");
    // deny all, as before.
    assert_eq!(to("GET", "/acl/x"), open(3), "{t}");
    assert_eq!(to("DELETE", "/acl/x").0, "deny 403", "{t}");
    // auth_basic_user_file of the location, auth_basic of limit_except.
    assert_eq!(to("GET", "/inh/x"), open(4), "{t}");
    assert_eq!(to("PATCH", "/inh/x"), asked(4), "{t}");
}

#[test]
fn internal_rewrites_replace_the_whole_path() {
    let (v, _, t) = run("server { listen 80;\n\
         location /api/ { rewrite ^/api/ /v2/ break; proxy_pass http://127.0.0.1:1; }\n\
         location /b/ { rewrite /old/(\\w+) /new/$1 break; proxy_pass http://127.0.0.1:1; }\n\
         location /c/ { rewrite ^/c/(.*)$ /d/$1 break; proxy_pass http://127.0.0.1:1; }\n\
         location /e/ { rewrite ^/e/x\\.* /f/ break; proxy_pass http://127.0.0.1:1; } }\n");
    loads(&t);
    let rw = |p: &str| {
        let r = rules(&v, 0).into_iter().find(|r| r["when"]["path_prefix"].as_str() == Some(p)).unwrap();
        (
            r["rewrite_path"]["regex"].as_str().unwrap().to_string(),
            r["rewrite_path"]["to"].as_str().unwrap().to_string(),
        )
    };
    // Tollgate replaces the first match, as Regex::replace does.
    let apply = |(re, to): (String, String), path: &str| regex::Regex::new(&re).unwrap().replace(path, to).into_owned();
    assert_eq!(apply(rw("/api/"), "/api/x"), "/v2/", "{t}");
    assert_eq!(apply(rw("/api/"), "/api/"), "/v2/", "{t}");
    assert_eq!(apply(rw("/b/"), "/b/old/abc/def"), "/new/abc", "{t}");
    assert_eq!(apply(rw("/b/"), "/b/other"), "/b/other", "{t}");
    // Already spanning the path: kept as written.
    assert_eq!(rw("/c/").0, "^/c/(.*)$");
    assert_eq!(apply(rw("/c/"), "/c/a/b"), "/d/a/b");
    // `\.*` is dots, not the rest of the path.
    assert_eq!(apply(rw("/e/"), "/e/x..y"), "/f/", "{t}");
}

#[test]
fn auth_is_not_asked_where_nginx_answers_first() {
    let dir = tempfile::tempdir().unwrap();
    let pw = htpasswd(dir.path());
    let text = format!(
        "server {{ listen 80; auth_basic \"site\"; auth_basic_user_file {pw};\n\
         location /old/ {{ return 301 https://example.com/new/; }}\n\
         location /gone/ {{ return 410; }}\n\
         location /closed/ {{ deny all; }}\n\
         location /acl/ {{ allow 10.0.0.0/8; deny all; proxy_pass http://127.0.0.1:1; }}\n\
         location /r/ {{ allow 10.0.0.0/8; deny all; return 301 https://example.com/; }}\n\
         location /drop/ {{ return 444; }}\n\
         location / {{ proxy_pass http://127.0.0.1:2; }}\n}}\n"
    );
    let (v, _, t) = run(&text);
    loads(&t);
    for r in rules(&v, 0) {
        let answers = ["redirect", "deny", "silent_drop", "tarpit"].iter().any(|k| r.get(*k).is_some());
        assert!(!(answers && r.get("auth").is_some()), "{t}");
    }
    let to = |p: &str| route(&v, 0, &req("a.test", "GET", p, &[]));
    let asked = vec!["htpasswd".to_string()];
    assert_eq!(to("/old/x").0, "redirect", "{t}");
    assert_eq!(to("/gone/x").0, "deny 410", "{t}");
    assert_eq!(to("/drop/x").0, "silent_drop", "{t}");
    assert_eq!(to("/closed/x").0, "deny 403", "{t}");
    // satisfy all: the address rules, then the password.
    assert_eq!(to("/acl/x").0, "deny 403", "{t}");
    let acl = rules(&v, 0).into_iter().find(|r| r.get("backend").and_then(|b| b.as_str()) == Some("127.0.0.1_1"));
    assert!(acl.is_some_and(|r| r.get("auth").is_some()), "{t}");
    // nginx's return comes before allow/deny.
    assert_eq!(to("/r/x").0, "redirect", "{t}");
    assert_eq!(to("/x"), ("backend 127.0.0.1_2".to_string(), asked), "{t}");
}

#[test]
fn server_level_return_and_rewrite_with_auth_load() {
    let dir = tempfile::tempdir().unwrap();
    let pw = htpasswd(dir.path());
    let text = format!(
        "server {{ listen 80; server_name a.test; auth_basic \"site\"; auth_basic_user_file {pw};\n\
         return 301 https://a.test$request_uri;\n location / {{ proxy_pass http://127.0.0.1:1; }} }}\n\
         server {{ listen 80; server_name b.test; auth_basic \"site\"; auth_basic_user_file {pw};\n\
         rewrite ^/old/ https://b.test/new/ permanent;\n location / {{ proxy_pass http://127.0.0.1:2; }}\n\
         location /priv/ {{ deny all; auth_basic \"p\"; }} }}\n"
    );
    let (v, _, t) = run(&text);
    loads(&t);
    let to = |h: &str, p: &str| route(&v, 0, &req(h, "GET", p, &[]));
    assert_eq!(to("a.test", "/x").0, "redirect", "{t}");
    assert_eq!(to("b.test", "/old/x").0, "redirect", "{t}");
    assert_eq!(to("b.test", "/x"), ("backend 127.0.0.1_2".to_string(), vec!["htpasswd".to_string()]), "{t}");
    assert_eq!(to("b.test", "/priv/x").0, "deny 403", "{t}");
}
