use super::*;
use sha_crypt::{CustomizedPasswordHasher, Params};
use std::path::Path;
use std::time::Duration;
use tollgate_config::parse_password_hash;

/// Known answers: (hash, its password). The SHA-crypt ones are from the
/// algorithm's specification and from glibc (`mkpasswd`, `openssl passwd`),
/// the `$2y$` ones from Apache's `htpasswd -nbB`, the others from the bcrypt
/// crate's own tests (Python's and an online tool's hashes).
const VECTORS: &[(&str, &str)] = &[
    (
        "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1",
        "Hello world!",
    ),
    (
        "$6$rounds=10000$saltstringsaltst$OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8vOuZeHBy/YTBmSK6H9qs/y3RnOaw5v.",
        "Hello world!",
    ),
    (
        "$6$rounds=5000$saltsalt$e/5XKibXPLqVcfjpD.ouauaJrAOL5V0uo80Lt7n7EbRdRiCx3HbQ90yjOHr.G0T.mx79PEMRy8nmtr0qSYhQp1",
        "open sesame",
    ),
    ("$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.", "secret"),
    ("$5$saltstring$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZaBBGWEc5", "Hello world!"),
    ("$5$rounds=1000$saltsalt$nKsyTQBmKz4GdCft0Sv/FbzLiu0y3wFdEXOzudLQLJ5", "open sesame"),
    ("$5$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM.", "secret"),
    ("$2y$04$ieC/6.sdsgh7et5GP1.TWOpD60Y/tHKeVDer3U4fu85hjkze45Hiu", "open sesame"),
    ("$2y$05$Wpl6OhabxTPL6A.7bsUVxOFnJg92DEdhY8AFJMINfJfsRsOsYmwMO", "abcdefghijklmnop"),
    ("$2a$04$UuTkLRZZ6QofpDOlMz32MuuxEHA43WOemOYHPz6.SjsVsyO1tDU96", "password"),
    ("$2b$04$EGdrhbKUv8Oc9vGiXX0HQOxSg445d458Muh7DAHskb6QbtCvdxcie", "correctbatteryhorsestapler"),
];

#[test]
fn known_hashes_of_each_scheme_parse_and_check() {
    for (hash, password) in VECTORS {
        let stored = parse_password_hash(hash).unwrap_or_else(|e| panic!("{hash}: {e}"));
        let scheme = match &hash[..3] {
            "$6$" => "sha512-crypt",
            "$5$" => "sha256-crypt",
            _ => "bcrypt",
        };
        assert_eq!(stored.scheme(), scheme, "{hash}");
        assert!(password_matches(&stored, password.as_bytes()), "{hash} with {password:?}");
        assert!(!password_matches(&stored, format!("{password}x").as_bytes()), "{hash}");
        assert!(!password_matches(&stored, b""), "{hash}");
    }
}

#[test]
fn hashes_the_crates_make_parse_and_check() {
    for version in [bcrypt::Version::TwoA, bcrypt::Version::TwoB, bcrypt::Version::TwoY] {
        let hash = bcrypt::hash_with_salt("pässwörd", 4, *b"0123456789abcdef").unwrap().format_for_version(version);
        let stored = parse_password_hash(&hash).unwrap_or_else(|e| panic!("{hash}: {e}"));
        assert!(password_matches(&stored, "pässwörd".as_bytes()), "{hash}");
        assert!(!password_matches(&stored, b"passwoerd"), "{hash}");
    }
    for (alg, scheme) in [(ShaCrypt::SHA256, "sha256-crypt"), (ShaCrypt::SHA512, "sha512-crypt")] {
        for salt_len in 1..=12 {
            let salt: Vec<u8> = (0..salt_len).map(|i: u8| i.wrapping_mul(37).wrapping_add(11)).collect();
            for rounds in [1_000, 5_000, 12_345] {
                let hash =
                    alg.hash_password_customized(b"s3cret", &salt, None, None, Params::new(rounds).unwrap()).unwrap();
                let hash = hash.as_str();
                let stored = parse_password_hash(hash).unwrap_or_else(|e| panic!("{hash}: {e}"));
                assert_eq!(stored.scheme(), scheme);
                assert!(password_matches(&stored, b"s3cret"), "{hash}");
                assert!(!password_matches(&stored, b"s3cre"), "{hash}");
            }
        }
    }
}

/// What the config accepts at load time is exactly what the crates can check:
/// every last character of a bcrypt salt and hash, and of a SHA-crypt digest.
#[test]
fn load_time_syntax_agrees_with_the_crates() {
    let alphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let bcrypt_hash = "$2b$04$EGdrhbKUv8Oc9vGiXX0HQOxSg445d458Muh7DAHskb6QbtCvdxcie";
    // The last salt character carries 2 bits of salt, the last hash character 4.
    for (at, valid) in [(28, 4), (59, 16)] {
        let mut loaded = 0;
        for c in alphabet.chars() {
            let mut h = bcrypt_hash.to_string();
            h.replace_range(at..at + 1, &c.to_string());
            let loads = parse_password_hash(&h).is_ok();
            let checkable = bcrypt::verify("x", &h).is_ok();
            assert_eq!(loads, checkable, "{h}");
            loaded += usize::from(loads);
        }
        assert_eq!(loaded, valid, "at {at}");
    }
    // The last digest character carries 2 bits (SHA-512) or 4 (SHA-256).
    for (hash, _) in VECTORS.iter().filter(|(h, _)| h.starts_with("$5$") || h.starts_with("$6$")) {
        let mut loaded = 0;
        for c in alphabet.chars() {
            let mut h = hash.to_string();
            h.replace_range(h.len() - 1.., &c.to_string());
            let loads = parse_password_hash(&h).is_ok();
            let checkable = !matches!(
                ShaCrypt::default().verify_password(b"x", h.as_str()),
                Err(e) if e != sha_crypt::password_hash::Error::PasswordInvalid
            );
            assert_eq!(loads, checkable, "{h}");
            loaded += usize::from(loads);
        }
        assert_eq!(loaded, if hash.starts_with("$6$") { 4 } else { 16 }, "{hash}");
    }
}

#[test]
fn basic_credentials_are_read_from_the_header_value() {
    let c = basic_credentials(b"Basic YWxpY2U6c2VjcmV0").unwrap();
    assert_eq!((c.user(), c.password()), (&b"alice"[..], &b"secret"[..]));
    // Scheme in any case, spaces around, no padding, `:` in the password.
    let c = basic_credentials(b"  bAsIc   Ym9iOmE6YjpjOg  ").unwrap();
    assert_eq!((c.user(), c.password()), (&b"bob"[..], &b"a:b:c:"[..]));
    let c = basic_credentials(b"Basic Y2Fyb2w6").unwrap();
    assert_eq!((c.user(), c.password()), (&b"carol"[..], &b""[..]));
    for bad in
        [&b"Basic YWxpY2U="[..], b"Bearer YWxpY2U6c2VjcmV0", b"Basic", b"Basic !!!!", b"", b"BasicYWxpY2U6c2VjcmV0"]
    {
        assert!(basic_credentials(bad).is_none(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn realms_are_quoted_in_the_challenge() {
    assert_eq!(challenge("Restricted"), r#"Basic realm="Restricted", charset="UTF-8""#);
    assert_eq!(challenge(r#"My "own" \ realm"#), r#"Basic realm="My \"own\" \\ realm", charset="UTF-8""#);
    assert!(http::HeaderValue::from_str(&challenge(r#"a"b\c"#)).is_ok());
}

#[test]
fn constant_time_eq_compares_whole_values() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"ab"));
    assert!(constant_time_eq(b"", b""));
}

#[tokio::test]
async fn the_limiter_bounds_running_and_waiting_checks() {
    let l = Arc::new(Limiter::new(1, 1));
    let first = l.enter().await.expect("a free permit");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn({
        let l = l.clone();
        async move {
            let p = l.enter().await;
            tx.send(p.is_some()).unwrap();
        }
    });
    while l.waiting.load(Ordering::Relaxed) == 0 {
        tokio::task::yield_now().await;
    }
    assert!(l.enter().await.is_none(), "one already waits");
    drop(first);
    assert!(rx.await.unwrap(), "the waiting check gets the permit");
    waiter.await.unwrap();
    assert_eq!(l.waiting.load(Ordering::Relaxed), 0);
    assert!(l.enter().await.is_some());
}

const CONFIG: &str = r#"
[[userlist]]
name = "team"
users = [
  { name = "alice", password = "$2y$04$ieC/6.sdsgh7et5GP1.TWOpD60Y/tHKeVDer3U4fu85hjkze45Hiu" },
  { name = "bob", password = "$6$rounds=5000$saltsalt$e/5XKibXPLqVcfjpD.ouauaJrAOL5V0uo80Lt7n7EbRdRiCx3HbQ90yjOHr.G0T.mx79PEMRy8nmtr0qSYhQp1" },
  { name = "carol", insecure_password = "plain" },
]

[[userlist]]
name = "ops"
users = [{ name = "carol", insecure_password = "plain" }]

[[frontend]]
name = "web"
bind = ["127.0.0.1:0"]
default_backend = "b"
auth = { userlist = "team", strip = true }
  [[frontend.rule]]
  when = { path_prefix = "/ops/" }
  auth = { userlist = "ops", realm = "Ops" }

[[backend]]
name = "b"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:1"
"#;

fn config(src: &str) -> Config {
    tollgate_config::parse_offline(src, Path::new("auth.toml")).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn passed_passwords_are_remembered_and_failed_ones_are_not() {
    let auth = AuthRt::new(&config(CONFIG), None);
    let team = auth.userlist("team").unwrap().clone();
    assert!(team.verify(b"alice", b"open sesame").await.unwrap());
    assert_eq!(team.hash_checks(), 1);
    assert!(team.verify(b"alice", b"open sesame").await.unwrap());
    assert_eq!(team.hash_checks(), 1, "the second time costs no bcrypt");
    for n in 2..=3 {
        assert!(!team.verify(b"alice", b"open sesame!").await.unwrap());
        assert_eq!(team.hash_checks(), n, "a wrong password is checked every time");
    }
    assert!(team.verify(b"alice", b"open sesame").await.unwrap(), "still remembered");
    assert!(team.verify(b"bob", b"open sesame").await.unwrap());
    assert!(!team.verify(b"bob", b"Open sesame").await.unwrap());
    assert_eq!(team.hash_checks(), 5);
    // An unknown name costs a check too (bcrypt: one user of each kind, alice
    // first); insecure passwords cost none.
    assert!(!team.verify(b"mallory", b"open sesame").await.unwrap());
    assert_eq!(team.hash_checks(), 6);
    assert_eq!(team.hash_checks_of("bcrypt"), 4);
    assert!(team.verify(b"carol", b"plain").await.unwrap());
    assert!(!team.verify(b"carol", b"plain ").await.unwrap());
    assert!(!team.verify(b"bob", &[b'a'; MAX_PASSWORD + 1]).await.unwrap());
    assert_eq!(team.hash_checks(), 6);
    // The tag is not the password.
    let tag = team.passed[0].lock().unwrap();
    assert_ne!(tag, team.tag(b"open sesame!"));
    assert_ne!(tag[0], tag[1]);
}

#[test]
fn a_reload_keeps_an_unchanged_userlist_and_what_it_remembers() {
    let old = AuthRt::new(&config(CONFIG), None);
    let changed = CONFIG.replace(
        r#"[{ name = "carol", insecure_password = "plain" }]"#,
        r#"[{ name = "dave", insecure_password = "x" }]"#,
    );
    let new = AuthRt::new(&config(&changed), Some(&old));
    assert!(Arc::ptr_eq(new.userlist("team").unwrap(), old.userlist("team").unwrap()));
    assert!(!Arc::ptr_eq(new.userlist("ops").unwrap(), old.userlist("ops").unwrap()));
}

fn fields(authorization: &[&str]) -> Fields {
    let mut f = Fields::default();
    f.append(b"host", b"x");
    for a in authorization {
        f.append(b"Authorization", a.as_bytes());
    }
    f
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

#[tokio::test]
async fn check_asks_every_policy_in_order_and_strips_when_told() {
    let cfg = config(CONFIG);
    let auth = AuthRt::new(&cfg, None);
    let (fe, be) = (&cfg.frontends[0], &cfg.backends[0]);
    let ops = fe.rules[0].auth.as_ref().unwrap();
    let client: SocketAddr = "192.0.2.1:5000".parse().unwrap();
    let reason = |r: Result<(), ProxyError>| match r {
        Ok(()) => ("ok", String::new()),
        Err(ProxyError::Unauthorized { challenge, reason }) => (reason, challenge),
        Err(e) => panic!("{e:?}"),
    };

    let mut f = fields(&[]);
    let (why, ch) = reason(check(&auth, fe, &[], be, &mut f, client).await);
    assert_eq!((why, ch.as_str()), ("auth-required", r#"Basic realm="web", charset="UTF-8""#));

    let mut f = fields(&[&basic("alice", "nope")]);
    assert_eq!(reason(check(&auth, fe, &[], be, &mut f, client).await).0, "auth-failed");

    // Two Authorization fields are no credentials.
    let mut f = fields(&[&basic("carol", "plain"), &basic("carol", "plain")]);
    assert_eq!(reason(check(&auth, fe, &[], be, &mut f, client).await).0, "auth-required");

    // The frontend's list passes alice; the rule's asks for its own realm.
    let mut f = fields(&[&basic("alice", "open sesame")]);
    let (why, ch) = reason(check(&auth, fe, &[ops], be, &mut f, client).await);
    assert_eq!((why, ch.as_str()), ("auth-failed", r#"Basic realm="Ops", charset="UTF-8""#));
    assert_eq!(f.get(b"authorization").map(<[u8]>::to_vec), Some(basic("alice", "open sesame").into_bytes()));

    // carol is in both; the frontend's `strip` removes the field.
    let mut f = fields(&[&basic("carol", "plain")]);
    assert_eq!(reason(check(&auth, fe, &[ops], be, &mut f, client).await).0, "ok");
    assert_eq!(f.get(b"authorization"), None);
    assert_eq!(f.get(b"host"), Some(&b"x"[..]));

    // No policy: nothing is looked at or removed.
    let open = config(&CONFIG.replace("auth = { userlist = \"team\", strip = true }\n", ""));
    let mut f = fields(&["Basic garbage"]);
    assert_eq!(reason(check(&auth, &open.frontends[0], &[], be, &mut f, client).await).0, "ok");
    assert!(f.get(b"authorization").is_some());
}

/// A userlist of users `u0`, `u1`, ... with `passwords`: hashes, or
/// `insecure_password`s for what is not one.
fn list_of(passwords: &[&str]) -> Arc<UserlistRt> {
    let users = passwords
        .iter()
        .enumerate()
        .map(|(i, p)| tollgate_config::User {
            name: format!("u{i}"),
            password: parse_password_hash(p).unwrap_or_else(|_| Password::Insecure(p.to_string())),
        })
        .collect();
    let failure_delay = Userlist::DEFAULT_FAILURE_DELAY;
    Arc::new(UserlistRt::new(Arc::new(Userlist { name: "l".into(), users, failure_delay })))
}

/// The checks `list` has run, per scheme: bcrypt, SHA-256 crypt, SHA-512 crypt.
fn checks(list: &UserlistRt) -> [u64; 3] {
    ["bcrypt", "sha256-crypt", "sha512-crypt"].map(|s| list.hash_checks_of(s))
}

/// An unknown name runs the verifier of the kind most users have, as a known
/// name with a wrong password mostly does, not that of whichever user has a
/// hash first; when most users have insecure passwords, none.
#[tokio::test]
async fn an_unknown_name_is_checked_with_the_kind_most_users_have() {
    let (bcrypt4, sha512, sha512_10k, sha256) = (VECTORS[7].0, VECTORS[0].0, VECTORS[1].0, VECTORS[5].0);
    let (bcrypt4_too, sha512_too) = (VECTORS[9].0, VECTORS[3].0);
    let cases: &[(&[&str], [u64; 3])] = &[
        (&[bcrypt4, sha512, sha512_too], [0, 0, 1]),
        (&[sha256, bcrypt4, bcrypt4_too], [1, 0, 0]),
        (&[sha512_10k, sha256, sha256], [0, 1, 0]),
        // A tie: the kind met first.
        (&[sha256, bcrypt4], [0, 1, 0]),
        (&["plain", "text", bcrypt4], [0, 0, 0]),
        (&["plain"], [0, 0, 0]),
    ];
    for (passwords, want) in cases {
        let list = list_of(passwords);
        assert!(!list.verify(b"mallory", b"open sesame").await.unwrap());
        assert_eq!(checks(&list), *want, "{passwords:?}");
    }
    // Among hashes of one scheme, the cost most have: 5000 rounds, not 10000.
    let list = list_of(&[sha512_10k, sha512, sha512_too]);
    assert_eq!(cost_of(&list.dummy), ("sha512-crypt", 5000));
    let list = list_of(&[sha512_10k, sha512_10k, sha512]);
    assert_eq!(cost_of(&list.dummy), ("sha512-crypt", 10000));
    // A known name runs its own hash's verifier.
    let list = list_of(&[bcrypt4, sha512, sha512_too]);
    assert!(!list.verify(b"u0", b"open sesame!").await.unwrap());
    assert!(!list.verify(b"u2", b"open sesame!").await.unwrap());
    assert_eq!(checks(&list), [1, 0, 1]);
    // The dummy's password does not let an unknown name in.
    assert!(!list_of(&["plain", "text"]).verify(b"x", b"\0not a password\0").await.unwrap());
}

/// The dummy is the kind's hash with a zero digest: well formed (the config
/// loads it, the crates check it in full rather than refuse it at once), of the
/// same scheme and cost, matched by no password.
#[test]
fn dummies_are_checked_in_full_at_the_same_cost() {
    for (hash, password) in VECTORS {
        let stored = parse_password_hash(hash).unwrap();
        let dummy = dummy_for(&[tollgate_config::User { name: "u".into(), password: stored.clone() }]);
        let text = match &dummy {
            Password::Bcrypt(h) | Password::Sha256Crypt(h) | Password::Sha512Crypt(h) => h.clone(),
            Password::Insecure(_) => panic!("{hash}: an insecure dummy"),
        };
        assert_eq!(parse_password_hash(&text).map(|p| cost_of(&p)), Ok(cost_of(&stored)), "{text}");
        assert_eq!(text.len(), hash.len(), "{text}");
        assert!(!password_matches(&dummy, password.as_bytes()), "{text}");
        if hash.starts_with("$2") {
            assert_eq!(bcrypt::verify(password, &text).ok(), Some(false), "{text}");
        } else {
            let verified = ShaCrypt::default().verify_password(password.as_bytes(), text.as_str());
            assert_eq!(verified, Err(sha_crypt::password_hash::Error::PasswordInvalid), "{text}");
        }
    }
}

/// A wrong password gets its 401 no sooner than the list's `failure_delay`
/// after the check began (tokio's paused clock: the delay is a timer); a right
/// one, or none at all, at once.
#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_answered_after_the_failure_delay() {
    let src = CONFIG.replacen("name = \"team\"\n", "name = \"team\"\nfailure_delay = \"250ms\"\n", 1);
    let cfg = config(&src);
    let auth = AuthRt::new(&cfg, None);
    let (fe, be) = (&cfg.frontends[0], &cfg.backends[0]);
    let ops = fe.rules[0].auth.as_ref().unwrap();
    let client: SocketAddr = "192.0.2.1:5000".parse().unwrap();
    let timed = async |authorization: &[&str], rules: &[&AuthPolicy]| {
        let mut f = fields(authorization);
        let t = tokio::time::Instant::now();
        let r = check(&auth, fe, rules, be, &mut f, client).await;
        let reason = match r {
            Ok(()) => "ok",
            Err(ProxyError::Unauthorized { reason, .. }) => reason,
            Err(e) => panic!("{e:?}"),
        };
        (reason, t.elapsed())
    };
    let team = Duration::from_millis(250);
    for wrong in [basic("carol", "plain!"), basic("mallory", "plain")] {
        let (why, took) = timed(&[&wrong], &[]).await;
        assert_eq!(why, "auth-failed");
        assert!(took >= team, "{wrong}: {took:?}");
    }
    let (why, took) = timed(&[&basic("carol", "plain")], &[]).await;
    assert!(why == "ok" && took < team, "{why} {took:?}");
    let (why, took) = timed(&[], &[]).await;
    assert!(why == "auth-required" && took < team, "{why} {took:?}");
    // The rule's list (ops) has the default.
    assert_eq!(cfg.userlists[1].failure_delay, Duration::from_millis(300));
    let (why, took) = timed(&[&basic("alice", "open sesame")], &[ops]).await;
    assert!(why == "auth-failed" && took >= Duration::from_millis(300), "{why} {took:?}");
    // 0: at once.
    let src = CONFIG.replacen("name = \"team\"\n", "name = \"team\"\nfailure_delay = 0\n", 1);
    let cfg = config(&src);
    let auth = AuthRt::new(&cfg, None);
    let mut f = fields(&[&basic("carol", "nope")]);
    let t = tokio::time::Instant::now();
    let r = check(&auth, &cfg.frontends[0], &[], &cfg.backends[0], &mut f, client).await;
    assert!(matches!(r, Err(ProxyError::Unauthorized { reason: "auth-failed", .. })));
    assert_eq!(t.elapsed(), Duration::ZERO);
}
