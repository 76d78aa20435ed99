//! `[[table]]`s of counters, a frontend's `track`, `counter` conditions, the
//! `deny` / `tarpit` / `silent_drop` actions and connection rules.

use super::*;
use http::HeaderName;
use std::path::Path;
use std::time::Duration;

const BASE: &str = r#"
[[table]]
name = "per_ip"
key = "src"
size = 5000
expire = "2m"
period = "10s"

[[table]]
name = "per_key"
key = "header:X-Api-Key"

[[table]]
name = "per_session"
key = "cookie:sid"

[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
default_backend = "app"
track = ["per_ip", "per_key"]
  [[frontend.connection_rule]]
  when = { counter = { table = "per_ip", name = "conn_cur", above = 20 } }
  reject = true
  [[frontend.connection_rule]]
  when = { all = [{ src = "10.0.0.0/8" }, { counter = { table = "per_ip", name = "conn_rate", above = 100 } }] }
  silent_drop = true
  [[frontend.rule]]
  when = { counter = { table = "per_ip", name = "http_req_rate", above = 100 } }
  deny = 429
  [[frontend.rule]]
  when = { counter = { table = "per_key", name = "http_err_rate", above = 10 } }
  tarpit = "3s"
  [[frontend.rule]]
  when = { path_prefix = "/wp-admin" }
  silent_drop = true
  [[frontend.rule]]
  when = { counter = { table = "per_key", name = "bytes_out_rate", above = 1000000 } }
  deny = { status = 503, retry_after = "1m", body = "slow down" }

[[backend]]
name = "app"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:9000"
"#;

fn parse(toml: &str) -> Result<Config, ConfigErrors> {
    crate::parse(toml, Path::new("t.toml"))
}

fn errors(toml: &str) -> String {
    parse(toml).unwrap_err().to_string()
}

#[test]
fn tables_track_and_rules_build() {
    let c = parse(BASE).unwrap();
    assert_eq!(c.tables.len(), 3);
    let t = &c.tables[0];
    assert_eq!(
        (t.key.clone(), t.size, t.expire, t.period),
        (TrackKey::Src, 5000, Duration::from_secs(120), Duration::from_secs(10))
    );
    assert_eq!(c.tables[1].key, TrackKey::Header(HeaderName::from_static("x-api-key")));
    assert_eq!(c.tables[2].key, TrackKey::Cookie("sid".into()));
    assert_eq!(
        (c.tables[1].size, c.tables[1].expire, c.tables[1].period),
        (100_000, Duration::from_secs(60), Duration::from_secs(10))
    );
    let fe = &c.frontends[0];
    assert_eq!(fe.track, vec![0, 1]);
    assert_eq!(fe.connection_rules.len(), 2);
    assert_eq!(fe.connection_rules[0].action, ConnectionAction::Reject);
    assert_eq!(fe.connection_rules[1].action, ConnectionAction::SilentDrop);
    match (&fe.rules[0].when, &fe.rules[0].action) {
        (Condition::Counter(cc), Some(Action::Deny { status, retry_after, .. })) => {
            assert_eq!((cc.table, cc.counter, cc.above), (0, Counter::HttpReqRate, 100));
            // A 429 says when to come back: the table's period by default.
            assert_eq!((status.as_u16(), *retry_after), (429, Some(10)));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(fe.rules[1].action, Some(Action::Tarpit { delay, status }) if delay == Duration::from_secs(3) && status.as_u16() == 500)
    );
    assert!(matches!(fe.rules[2].action, Some(Action::SilentDrop)));
    assert!(fe.rules[2].path_case_insensitive, "an access rule compares paths without case");
    assert!(
        matches!(&fe.rules[3].action, Some(Action::Deny { status, retry_after: Some(60), body: Some(b) }) if status.as_u16() == 503 && b == "slow down")
    );
}

/// A counter condition reads the request's entry.
#[test]
fn a_counter_condition_compares_the_tracked_value() {
    struct Fixed(u64);
    impl CounterLookup for Fixed {
        fn counter(&self, table: usize, c: Counter) -> Option<u64> {
            (table == 0 && c == Counter::HttpReqRate).then_some(self.0)
        }
    }
    let cond = Condition::Counter(CounterCond { table: 0, counter: Counter::HttpReqRate, above: 100 });
    let headers = http::HeaderMap::new();
    let facts = |c: &'static dyn CounterLookup| RequestFacts {
        host: "",
        path: "/",
        method: &http::Method::GET,
        headers: &headers,
        src: "127.0.0.1".parse().unwrap(),
        tls: false,
        sni: "",
        counters: c,
        client_cert: None,
    };
    assert!(!cond.matches(&facts(&Fixed(100))), "100 is not above 100");
    assert!(cond.matches(&facts(&Fixed(101))));
    assert!(!cond.matches(&facts(&NoCounters)), "not tracked: no match");
}

#[test]
fn mistakes_are_named_with_their_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("key = \"src\"", "key = \"ip\"", "table[0].key: `ip` is not a key"),
        (
            "key = \"header:X-Api-Key\"",
            "key = \"header:bad name\"",
            "table[1].key: `bad name` is not a valid header name",
        ),
        ("key = \"cookie:sid\"", "key = \"cookie:\"", "table[2].key: `` is not a cookie name"),
        ("size = 5000", "size = 0", "table[0].size: 0 is out of range"),
        ("expire = \"2m\"", "expire = \"5s\"", "table[0].expire: 5s is shorter than the table's period (10s)"),
        (
            "track = [\"per_ip\", \"per_key\"]",
            "track = [\"per_ip\", \"nope\"]",
            "frontend[0].track[1]: no [[table]] is named `nope`",
        ),
        (
            "track = [\"per_ip\", \"per_key\"]",
            "track = [\"per_ip\", \"per_ip\"]",
            "frontend[0].track[1]: `per_ip` is tracked twice",
        ),
        (
            "name = \"http_req_rate\"",
            "name = \"req_rate\"",
            "frontend[0].rule[0].when.counter.name: `req_rate` is not a counter",
        ),
        (
            "table = \"per_ip\", name = \"http_req_rate\"",
            "table = \"per_session\", name = \"http_req_rate\"",
            "frontend[0].rule[0].when.counter.table: the frontend does not track `per_session`",
        ),
        (
            "table = \"per_key\", name = \"http_err_rate\"",
            "table = \"per_key\", name = \"conn_cur\"",
            "frontend[0].rule[1].when.counter.name: `conn_cur` counts connections, which only a table keyed by \"src\" sees",
        ),
        (
            "above = 100 } }\n  deny = 429",
            "above = -1 } }\n  deny = 429",
            "frontend[0].rule[0].when.counter.above: -1 is negative",
        ),
        ("tarpit = \"3s\"", "tarpit = { status = 429 }", "frontend[0].rule[1].tarpit.delay: give the time"),
        (
            "tarpit = \"3s\"",
            "tarpit = { delay = \"3s\", status = 200 }",
            "frontend[0].rule[1].tarpit.status: 200 is not an error status",
        ),
        (
            "\"/wp-admin\" }\n  silent_drop = true",
            "\"/wp-admin\" }\n  silent_drop = false",
            "frontend[0].rule[2].silent_drop: `silent_drop = false` does nothing",
        ),
        ("tarpit = \"3s\"", "tarpit = \"3s\"\n  deny = 403", "frontend[0].rule[1]: a rule takes at most one of"),
        (
            "  reject = true",
            "  reject = true\n  silent_drop = true",
            "frontend[0].connection_rule[0]: give one of `reject` or `silent_drop`, not both",
        ),
        (
            "  reject = true",
            "",
            "frontend[0].connection_rule[0]: a connection rule needs `reject = true` or `silent_drop = true`",
        ),
        (
            "when = { counter = { table = \"per_ip\", name = \"conn_cur\", above = 20 } }",
            "when = { path = \"/x\" }",
            "frontend[0].connection_rule[0].when.path: a connection rule acts before TLS and HTTP",
        ),
        (
            "when = { counter = { table = \"per_ip\", name = \"conn_cur\", above = 20 } }",
            "when = { counter = { table = \"per_key\", name = \"http_req_rate\", above = 20 } }",
            "frontend[0].connection_rule[0].when.counter: table `per_key` is keyed by a request's part",
        ),
        ("name = \"per_session\"", "name = \"app\"", "table[2].name: a backend is named `app`"),
        ("name = \"per_session\"", "name = \"per_ip\"", "table[2].name: table `per_ip` is defined twice"),
    ];
    for (from, to, want) in cases {
        assert!(BASE.contains(from), "{from}");
        let toml = BASE.replacen(from, to, 1);
        let e = errors(&toml);
        assert!(e.contains(want), "{to}: want `{want}` in\n{e}");
    }
    // At most three tables tracked.
    let four = BASE
        .replace("[[frontend]]", "[[table]]\nname = \"t4\"\nkey = \"path\"\n\n[[frontend]]")
        .replace("track = [\"per_ip\", \"per_key\"]", "track = [\"per_ip\", \"per_key\", \"per_session\", \"t4\"]");
    assert!(errors(&four).contains("frontend[0].track: a frontend tracks at most 3 tables"), "{}", errors(&four));
}

/// A tcp frontend tracks connections and has connection rules, but its
/// rules neither test counters nor deny.
#[test]
fn a_tcp_frontend_has_connection_rules_only() {
    let toml = r#"
[[table]]
name = "per_ip"
key = "src"

[[frontend]]
name = "db"
mode = "tcp"
bind = ["127.0.0.1:5432"]
default_backend = "pg"
track = ["per_ip"]
  [[frontend.connection_rule]]
  when = { counter = { table = "per_ip", name = "conn_cur", above = 5 } }
  reject = true

[[backend]]
name = "pg"
mode = "tcp"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:5433"
"#;
    let c = parse(toml).unwrap();
    assert_eq!(c.frontends[0].connection_rules.len(), 1);
    let bad = toml.replace(
        "  reject = true\n",
        "  reject = true\n  [[frontend.rule]]\n  when = { counter = { table = \"per_ip\", name = \"conn_cur\", above = 5 } }\n  tarpit = \"1s\"\n",
    );
    let e = errors(&bad);
    assert!(e.contains("frontend[0].rule[0].tarpit: `tarpit` acts on HTTP"), "{e}");
    assert!(e.contains("frontend[0].rule[0].when.counter: a tcp frontend's rules choose a backend"), "{e}");
}

/// `limits.lookalike_headers` and `limits.repeated_content_length`: their
/// values, inherited from `[defaults]`, and a wrong one named.
#[test]
fn normalisation_limits() {
    let toml = |limits: &str| {
        format!(
            "[defaults]\nlimits = {{ lookalike_headers = \"refuse\" }}\n\
             [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\nlimits = {{ {limits} }}\n"
        )
    };
    let c = parse(&toml("")).unwrap();
    assert_eq!(
        (c.frontends[0].limits.lookalike_headers, c.frontends[0].limits.refuse_repeated_length),
        (Lookalikes::Refuse, false)
    );
    let c = parse(&toml("lookalike_headers = \"keep\", repeated_content_length = \"refuse\"")).unwrap();
    assert_eq!(
        (c.frontends[0].limits.lookalike_headers, c.frontends[0].limits.refuse_repeated_length),
        (Lookalikes::Keep, true)
    );
    assert_eq!(Limits::default().lookalike_headers, Lookalikes::Drop);
    let e = errors(&toml("lookalike_headers = \"maybe\", repeated_content_length = \"sum\""));
    assert!(e.contains("frontend[0].limits.lookalike_headers: `maybe` is not"), "{e}");
    assert!(e.contains("frontend[0].limits.repeated_content_length: `sum` is not"), "{e}");
}
