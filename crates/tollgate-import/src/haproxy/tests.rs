//! Translations of small configs, one behaviour each.

use crate::Kind;
use std::path::Path;

fn tr(cfg: &str) -> (String, Vec<crate::Warning>) {
    let (out, warnings) = super::translate(cfg, Path::new("/nonexistent/h.cfg"), None, &|_| None).unwrap();
    (out.render(), warnings)
}

/// The output without comment lines.
fn keys(cfg: &str) -> String {
    tr(cfg)
        .0
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn auth_rules_become_auth_and_allow_guards_later_rules() {
    let k = keys(
        "userlist L\n user a insecure-password p\nfrontend f\n bind :80\n acl ok http_auth(L)\n acl adm path_beg /admin\n \
         http-request allow if { src 10.0.0.0/8 }\n http-request auth realm R if adm !ok\n default_backend b\nbackend b\n server s 10.0.0.1:80\n",
    );
    assert!(
        k.contains("when = { all = [{ path_prefix = \"/admin\" }, { not = { src = \"10.0.0.0/8\" } }] }\n  auth = { userlist = \"L\", realm = \"R\" }"),
        "{k}"
    );
}

#[test]
fn backend_edits_go_on_the_routes_to_it() {
    let k = keys(
        "frontend f\n bind :80\n use_backend api if { path_beg /api }\n default_backend web\n\
         backend api\n option forwardfor\n http-request set-header X-Api 1\n http-request deny if { method DELETE }\n server a 10.0.0.1:80\n\
         backend web\n http-response set-header X-Web 1\n server w 10.0.0.2:80\n",
    );
    let rules = &k[k.find("[[frontend.rule]]").unwrap()..k.find("[[backend]]").unwrap()];
    assert_eq!(
        rules,
        "[[frontend.rule]]\n  when = { path_prefix = \"/api\" }\n  set_request_headers.X-Api = \"1\"\n  \
         [[frontend.rule]]\n  when = { path_prefix = \"/api\", method = \"DELETE\" }\n  deny = 403\n  path_case_insensitive = false\n  \
         [[frontend.rule]]\n  when = { path_prefix = \"/api\" }\n  backend = \"api\"\n  \
         [[frontend.rule]]\n  set_response_headers.X-Web = \"1\"\n"
    );
    // forwardfor is on one of the backends routed to: forward_for stays on.
    assert!(!k.contains("forward_for"), "{k}");
}

#[test]
fn edits_that_depend_on_their_order_stay_in_their_own_rules() {
    let k = keys(
        "frontend f\n bind :80\n http-request add-header X a\n http-request set-header X b\n http-request set-header Y c\n default_backend b\nbackend b\n",
    );
    assert_eq!(k.matches("[[frontend.rule]]").count(), 2, "{k}");
    let k = keys(
        "frontend f\n bind :80\n http-request del-header X\n http-request set-header X b\n default_backend b\nbackend b\n",
    );
    assert_eq!(k.matches("[[frontend.rule]]").count(), 1, "{k}");
}

#[test]
fn listen_sections_and_defaults() {
    let k = keys(
        "defaults\n mode http\n timeout connect 5s\n timeout client 30s\n option redispatch\n balance leastconn\n\
         listen app\n bind 127.0.0.1:8080\n server s1 10.0.0.1:80 check inter 3s\n server s2 10.0.0.2:80\n\
         defaults\n mode tcp\n timeout client 1h\nlisten db\n bind :5432\n server p 10.0.0.3:5432\n",
    );
    assert!(k.contains("[defaults]\ntimeout.connect = \"5s\"\ntimeout.client = \"30s\"\nredispatch = true"), "{k}");
    assert!(k.contains("name = \"app\"\nbind = [\"127.0.0.1:8080\"]\ndefault_backend = \"app\""), "{k}");
    assert!(
        k.contains("name = \"app\"\nbalance = \"leastconn\"\ncheck = { type = \"tcp\", interval = \"3s\" }"),
        "{k}"
    );
    assert!(k.contains("name = \"s2\"\n  addr = \"10.0.0.2:80\"\n  check = false"), "{k}");
    assert!(k.contains("name = \"db\"\nmode = \"tcp\"\ntimeout.client = \"1h\""), "{k}");
}

#[test]
fn binds_once_per_address_and_ipv6_wildcards_take_ipv4_too() {
    let (text, w) = tr(
        "frontend f\n bind :::80\n bind 0.0.0.0:443 ssl crt /c/ process 1\n bind 0.0.0.0:443 ssl crt /c/ process 2\n \
         bind /run/x.sock\n bind :8000-8010\n default_backend b\nbackend b\n",
    );
    assert!(
        text.contains("bind = [\"[::]:80\", \":80\", { addr = \"0.0.0.0:443\", tls = { certs = [\"/c/\"] } }]"),
        "{text}"
    );
    assert_eq!(w.iter().filter(|w| w.kind == Kind::NoEquivalent).count(), 2, "{w:?}");
}

#[test]
fn servers_keep_what_tollgate_has() {
    let cfg = "global\n ca-base /etc/ssl/certs\nbackend b\n default-server inter 5s fall 2 weight 5\n \
         server a app.internal:8443 check ssl verify required ca-file ca.pem sni str(api) weight 10 maxconn 50 backup\n \
         server b 10.0.0.2 send-proxy-v2 disabled cookie b slowstart 10s\n";
    let (text, w) = (keys(cfg), tr(cfg).1);
    assert!(text.contains("check = { type = \"tcp\", interval = \"5s\", fall = 2 }"), "{text}");
    assert!(text.contains(
        "addr = \"app.internal:8443\"\n  weight = 10\n  maxconn = 50\n  backup = true\n  tls = { verify = \"full\", ca = \"/etc/ssl/certs/ca.pem\", sni = \"api\" }"
    ), "{text}");
    assert!(text.contains("addr = \"10.0.0.2:80\"\n  send_proxy = \"v2\"\n  disabled = true\n  cookie = \"b\"\n  weight = 5\n  check = false"), "{text}");
    let msgs: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
    assert!(msgs.iter().any(|m| m.contains("port 80")), "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("slowstart 10s")), "{msgs:?}");
}

#[test]
fn redirects_in_any_order_and_unknown_lines_reported() {
    let (text, w) = tr(
        "frontend f\n bind :80\n http-request redirect code 308 location https://x.example/ if { path /old }\n \
         redirect prefix https://www.example.com code 301 if { hdr(host) -i example.com }\n frobnicate 1\n default_backend b\nbackend b\n",
    );
    assert!(text.contains("redirect = { location = \"https://x.example/\", code = 308 }"), "{text}");
    assert!(text.contains("redirect = { prefix = \"https://www.example.com\", code = 301 }"), "{text}");
    let unknown: Vec<_> = w.iter().filter(|w| w.kind == Kind::Unknown).collect();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].pos.line, 5);
    assert!(text.contains("# UNKNOWN h.cfg:5: frobnicate 1"), "{text}");
}

#[test]
fn stats_listen_is_the_admin_listener() {
    let k =
        keys("listen stats\n bind :8404\n stats enable\n stats uri /stats\n stats refresh 10s\n stats auth admin:pw\n");
    assert_eq!(k, "[admin]\nbind = \"0.0.0.0:8404\"\nrefresh = \"10s\"\ntoken = \"pw\"\nread_only = true");
    let k = keys("listen stats\n bind :8404\n stats enable\n stats admin if TRUE\n");
    assert_eq!(k, "[admin]\nbind = \"0.0.0.0:8404\"");
}

#[test]
fn nothing_usable_without_a_bind() {
    let (out, _) = super::translate("backend b\n server s 10.0.0.1:80\n", Path::new("h.cfg"), None, &|_| None).unwrap();
    assert!(!out.usable());
}

#[test]
fn quic_binds_are_h3_on_the_tls_bind() {
    let k = keys(
        "frontend f\n bind :443 ssl crt /c.pem alpn h2,http/1.1\n bind quic4@:443 ssl crt /c.pem alpn h3\n default_backend b\nbackend b\n",
    );
    assert!(
        k.contains(
            "bind = [{ addr = \":443\", tls = { certs = [\"/c.pem\"], alpn = [\"h2\", \"http/1.1\"] }, h3 = true }]"
        ),
        "{k}"
    );
    let k = keys("frontend f\n bind quic4@:443 ssl crt /c.pem alpn h3\n default_backend b\nbackend b\n");
    assert!(k.contains("bind = [{ addr = \":443\", tls = { certs = [\"/c.pem\"] }, h3 = true }]"), "{k}");
}

#[test]
fn replace_path_and_set_path_rewrite_the_whole_path_as_haproxy_does() {
    let k = keys(
        "frontend f\n bind :80\n default_backend b\nbackend b\n http-request replace-path /api/(.*) /\\1\n \
         http-request set-path /fixed if { path /old }\n server s 10.0.0.1:80\n",
    );
    assert!(k.contains(r#"rewrite_path = { regex = "^.*?(?:/api/(.*)).*$", to = "/${1}" }"#), "{k}");
    assert!(k.contains("when = { path = \"/old\" }\n  rewrite_path = { regex = \"^.*$\", to = \"/fixed\" }"), "{k}");
    // HAProxy replaces the whole path when the regex matches anywhere in it.
    let re = regex::Regex::new(r"^.*?(?:/api/(.*)).*$").unwrap();
    assert_eq!(re.replace("/x/api/users/7", "/${1}"), "/users/7");
    let (_, w) = tr("backend b\n http-request set-path %[path,lower]\n");
    assert!(w[0].message.contains("samples"), "{w:?}");
}

#[test]
fn errorfiles_are_error_pages_and_stock_ones_stay_tollgates() {
    let (text, w) = tr("defaults\n errorfile 503 /etc/haproxy/errors/503.http\n errorfile 502 /srv/errors/502.http\n\
         frontend f\n bind :80\n errorfile 429 /srv/errors/429.http\n default_backend b\n\
         backend b\n errorfile 504 /srv/errors/504.http\n");
    assert!(
        text.contains("[defaults]\n# errorfile 502 /srv/errors/502.http\nerror_pages.502 = \"/srv/errors/502.http\""),
        "{text}"
    );
    assert!(
        text.contains("# errorfile 503 /etc/haproxy/errors/503.http  (HAProxy's stock page: Tollgate's own is used)"),
        "{text}"
    );
    assert!(text.contains("error_pages.429 = \"/srv/errors/429.http\""), "{text}");
    assert!(w.iter().any(|w| w.pos.line == 9 && w.message.contains("on the frontends that route here")), "{w:?}");
}

#[test]
fn edits_keep_their_order_within_and_across_rules() {
    // add, add of one name: two rules (one rule keeps one value per name).
    let k = keys(
        "frontend f\n bind :80\n http-request add-header X a\n http-request add-header X b\n default_backend b\nbackend b\n",
    );
    assert_eq!(k.matches("add_request_headers.X").count(), 2, "{k}");
    assert_eq!(k.matches("[[frontend.rule]]").count(), 2, "{k}");
    // A backend's edits stay in their order around its conditional ones.
    let k = keys(
        "frontend f\n bind :80\n default_backend b\nbackend b\n http-request set-header X-I 0\n \
         http-request set-header X-I 1 if { src 10.0.0.0/8 }\n http-request add-header X-B 1\n http-request del-header X-B\n",
    );
    let rules = &k[k.find("[[frontend.rule]]").unwrap()..];
    let (zero, one) = (rules.find("X-I = \"0\"").unwrap(), rules.find("X-I = \"1\"").unwrap());
    assert!(zero < one, "{rules}");
    let (add, del) =
        (rules.find("add_request_headers.X-B").unwrap(), rules.find("delete_request_headers = [\"X-B\"]").unwrap());
    assert!(add < del && rules[add..del].contains("[[frontend.rule]]"), "the delete in a later rule: {rules}");
}

#[test]
fn listen_rules_are_written_once_and_late_reads_reported() {
    let (text, w) = tr(
        "listen app\n bind :80\n stick-table type ip size 1k store http_req_rate(10s)\n http-request track-sc0 src\n \
         http-request set-header X-B api\n http-request deny if { hdr(X-B) api }\n server s 10.0.0.1:80\n",
    );
    assert_eq!(text.matches("[[table]]").count(), 1, "{text}");
    assert_eq!(text.matches("set_request_headers.X-B").count(), 1, "{text}");
    assert!(w.iter().any(|w| w.pos.line == 6 && w.message.contains("reads x-b")), "{w:?}");
}

#[test]
fn binds_that_tollgate_would_refuse_are_reported() {
    let (text, w) = tr(
        "frontend a\n bind 0.0.0.0:80\n default_backend b\nfrontend c\n bind *:80\n bind 127.0.0.1:80\n bind :8080\n default_backend b\nbackend b\n",
    );
    assert!(text.contains("bind = [\"0.0.0.0:80\"]") && text.contains("bind = [\":8080\"]"), "{text}");
    let lines: Vec<usize> = w.iter().filter(|w| w.kind == Kind::NoEquivalent).map(|w| w.pos.line).collect();
    assert_eq!(lines, [5, 6], "{w:?}");
}

/// Inputs a review found that panicked, overflowed or nested without bound.
#[test]
fn hostile_inputs_translate_without_panicking() {
    let many: String = (0..3000).map(|i| format!(" acl bad hdr_sub(User-Agent) -i bot{i}\n")).collect();
    for cfg in [
        "frontend f\n bind :80\n http-request set-header X-T \"%éé\"\n default_backend b\nbackend b\n".to_string(),
        "frontend f\n bind :80\n stick-table type ip size 10000000000000000k\n default_backend b\nbackend b\n".to_string(),
        "frontend f\n bind :80\n stick-table type ip size 1k\n tcp-request connection reject if { src_conn_cur ge -9223372036854775808 }\n default_backend b\nbackend b\n".to_string(),
        "cache c\n total-max-size 99999999999999999\nfrontend f\n bind :80\n default_backend b\nbackend b\n".to_string(),
        "frontend f\n bind :80\n foo \"a\\rb\"\n bar \u{1}\n default_backend b\nbackend b\n".to_string(),
        format!("frontend f\n bind :80\n{many} http-request deny if bad\n default_backend b\nbackend b\n"),
    ] {
        let (text, _) = tr(&cfg);
        let v: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let _ = v;
    }
}

#[test]
fn acls_haproxy_would_not_match_as_written_are_reported() {
    for cond in ["{ hdr_cnt(host) gt 1 }", "{ url_sub -i select }", "{ url_reg \\.php }"] {
        let (text, w) =
            tr(&format!("frontend f\n bind :80\n http-request deny if {cond}\n default_backend b\nbackend b\n"));
        assert!(!text.contains("deny = 403"), "{cond}: {text}");
        assert_eq!(w.len(), 1, "{cond}: {w:?}");
    }
    let (_, w) =
        tr("frontend f\n bind :80\n acl d hdr(X-Debug)\n http-request deny if d\n default_backend b\nbackend b\n");
    assert!(w[0].message.contains("never matches"), "{w:?}");
    let k = keys("frontend f\n bind :80\n http-request deny if { hdr_cnt(x-a) gt 0 }\n default_backend b\nbackend b\n");
    assert!(k.contains("header = { name = \"x-a\", present = true }"), "{k}");
    let k = keys(
        "frontend f\n bind :80\n stick-table type ip size 1k store http_req_cnt\n http-request track-sc0 src\n \
         http-request deny if { sc0_http_req_cnt gt 5 }\n default_backend b\nbackend b\n",
    );
    assert!(k.contains("counter = { table = \"f\", name = \"http_req_cnt\", above = 5 }"), "{k}");
}

#[test]
fn access_rules_keep_the_case_of_paths_and_tcp_accepts_guard_rejects() {
    let k = keys(
        "frontend f\n bind :80\n http-request deny if { path_beg /admin } !{ path_beg /admin/public }\n \
         http-request deny if { path_beg -i /secret }\n tcp-request connection accept if { src 10.0.0.0/8 }\n \
         tcp-request connection reject\n default_backend b\nbackend b\n",
    );
    assert!(k.contains("deny = 403\n  path_case_insensitive = false"), "{k}");
    assert!(
        k.contains("path_case_insensitive = true\n  deny = 403")
            || k.contains("deny = 403\n  path_case_insensitive = true"),
        "{k}"
    );
    assert!(k.contains("when = { not = { src = \"10.0.0.0/8\" } }\n  reject = true"), "{k}");
}
