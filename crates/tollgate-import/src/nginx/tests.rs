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
