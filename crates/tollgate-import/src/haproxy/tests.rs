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
        "[[frontend.rule]]\n  when = { path_prefix = \"/api\", method = \"DELETE\" }\n  deny = 403\n  \
         [[frontend.rule]]\n  when = { path_prefix = \"/api\" }\n  backend = \"api\"\n  set_request_headers.X-Api = \"1\"\n  \
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
