//! `[[userlist]]` and `auth`: what builds, the defaults, and every error with
//! its file:line and key path (naming the user, never the password).

use super::*;
use std::path::Path;
use std::time::Duration;

const BCRYPT: &str = "$2y$04$ieC/6.sdsgh7et5GP1.TWOpD60Y/tHKeVDer3U4fu85hjkze45Hiu";
const SHA512: &str =
    "$6$rounds=5000$saltsalt$e/5XKibXPLqVcfjpD.ouauaJrAOL5V0uo80Lt7n7EbRdRiCx3HbQ90yjOHr.G0T.mx79PEMRy8nmtr0qSYhQp1";
const SHA256: &str = "$5$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM.";

fn good() -> String {
    format!(
        r#"
[[userlist]]
name = "admins"
users = [
  {{ name = "alice", password = "{BCRYPT}" }},
  {{ name = "bob", password = "{SHA512}" }},
  {{ name = "carol", insecure_password = "plain" }},
]

[[userlist]]
name = "uploaders"
  [[userlist.users]]
  name = "dave"
  password = "{SHA256}"

[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
default_backend = "app"
auth = {{ userlist = "admins" }}
  [[frontend.rule]]
  when = {{ path_prefix = "/files/" }}
  auth = {{ userlist = "uploaders", realm = "TUS \"uploads\"" }}
  [[frontend.rule]]
  when = {{ host = "tus.example.com" }}
  backend = "tus"
  auth = {{ userlist = "uploaders" }}

[[backend]]
name = "app"
  [[backend.server]]
  name = "a1"
  addr = "127.0.0.1:3001"

[[backend]]
name = "tus"
auth = {{ userlist = "uploaders", strip = true }}
  [[backend.server]]
  name = "t1"
  addr = "127.0.0.1:1080"
"#
    )
}

fn errors(src: &str) -> Vec<String> {
    match parse(src, Path::new("auth.toml")) {
        Ok(_) => panic!("expected errors:\n{src}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn userlists_and_auth_build_with_default_realms() {
    let c = parse(&good(), Path::new("auth.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.userlists.len(), 2);
    let admins = &c.userlists[0];
    assert_eq!(admins.name, "admins");
    let users: Vec<(&str, &str)> = admins.users.iter().map(|u| (u.name.as_str(), u.password.scheme())).collect();
    assert_eq!(users, [("alice", "bcrypt"), ("bob", "sha512-crypt"), ("carol", "insecure")]);
    assert_eq!(admins.users[0].password, Password::Bcrypt(BCRYPT.into()));
    assert_eq!(admins.users[2].password, Password::Insecure("plain".into()));
    assert_eq!(c.userlists[1].users[0].password, Password::Sha256Crypt(SHA256.into()));
    assert_eq!(admins.failure_delay, Duration::from_millis(300), "the default");

    let f = &c.frontends[0];
    assert_eq!(f.auth, Some(AuthPolicy { userlist: 0, realm: "web".into(), strip: false }), "realm: the frontend");
    assert_eq!(f.rules[0].auth, Some(AuthPolicy { userlist: 1, realm: "TUS \"uploads\"".into(), strip: false }));
    assert!(f.rules[0].action.is_none(), "a rule with only `auth` is a rule");
    assert_eq!(f.rules[1].auth.as_ref().map(|a| a.realm.as_str()), Some("web"), "a rule's realm: its frontend");
    assert!(matches!(f.rules[1].action, Some(Action::Backend(1))));
    assert_eq!(c.backends[0].auth, None);
    assert_eq!(c.backends[1].auth, Some(AuthPolicy { userlist: 1, realm: "tus".into(), strip: true }));
    // A debug print shows no password and no hash.
    let debug = format!("{c:?}");
    assert!(!debug.contains("plain") && !debug.contains(BCRYPT), "{debug}");
    assert!(debug.contains("Password(bcrypt)"), "{debug}");
}

#[test]
fn password_errors_name_the_user_with_line_and_key_but_not_the_password() {
    let src = r#"
[[userlist]]
name = "ul"
users = [
  { name = "md5", password = "$1$saltsalt$qjXMvbEw8oaL.CzflDugX/" },
  { name = "plain", password = "hunter2hunter2" },
  { name = "cost", password = "$2b$03$EGdrhbKUv8Oc9vGiXX0HQOxSg445d458Muh7DAHskb6QbtCvdxcie" },
  { name = "cut", password = "$6$saltsalt$e/5XKibXPLqVcfjpD.ouauaJrAOL5V0uo80Lt7n7EbRdRiCx3HbQ90yjOHr" },
  { name = "rounds", password = "$5$rounds=999$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM." },
  { name = "yes", password = "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7" },
  { name = "buggy", password = "$2x$04$EGdrhbKUv8Oc9vGiXX0HQOxSg445d458Muh7DAHskb6QbtCvdxcie" },
  { name = "both", password = "$5$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM.", insecure_password = "x" },
  { name = "neither" },
  { name = "empty", insecure_password = "" },
  { name = "a:b", insecure_password = "x" },
  { name = "md5", insecure_password = "x" },
]

[[frontend]]
name = "web"
bind = [":8080"]
"#;
    let text = errors(src);
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("auth.toml:5:30: userlist[0].users[0].password: user `md5`: MD5-crypt"), "{text:#?}");
    assert!(has("auth.toml:6:32: userlist[0].users[1].password: user `plain`: not a password hash"), "{text:#?}");
    assert!(has("write a plain password as `insecure_password`"), "{text:#?}");
    assert!(!text.iter().any(|t| t.contains("hunter2")), "the value is not repeated: {text:#?}");
    assert!(has("auth.toml:7:31: userlist[0].users[2].password: user `cost`: a bcrypt cost is two digits, 04 to 31"));
    assert!(has("userlist[0].users[3].password: user `cut`: this SHA-crypt digest should be 86 characters"));
    assert!(has("userlist[0].users[4].password: user `rounds`: SHA-crypt `rounds=` is a number from 1000"));
    assert!(has("userlist[0].users[5].password: user `yes`: yescrypt and scrypt hashes are not supported"));
    assert!(has("userlist[0].users[6].password: user `buggy`: `$2x$` bcrypt hashes"), "{text:#?}");
    assert!(has("userlist[0].users[7].insecure_password: user `both` has both"), "{text:#?}");
    assert!(has("auth.toml:13:3: userlist[0].users[8]: user `neither` needs `password` (a hash) or"), "{text:#?}");
    assert!(has("userlist[0].users[9].insecure_password: user `empty`: empty password"), "{text:#?}");
    assert!(has("userlist[0].users[10].name: `a:b` cannot be a user name"), "{text:#?}");
    assert!(has("userlist[0].users[11].name: user `md5` is listed twice in userlist `ul`"), "{text:#?}");
    assert_eq!(text.len(), 12, "{text:#?}");
}

#[test]
fn auth_errors_are_reported_with_line_and_key() {
    let src = r#"
[[userlist]]
name = "ul"
users = [{ name = "u", insecure_password = "x" }]

[[userlist]]
name = "ul"
users = []

[[frontend]]
name = "web"
bind = [":8080"]
default_backend = "b"
auth = { userlist = "nobody" }
  [[frontend.rule]]
  when = { path = "/x" }
  auth = { userlist = "ul", realm = "caf\u00e9" }
  [[frontend.rule]]
  when = { path = "/y" }
  redirect = { location = "/z" }
  auth = { userlist = "ul" }
  [[frontend.rule]]
  auth = { userlist = "ul", realm = "" }

[[backend]]
name = "b"
auth = { userlist = "ul", realm = "line\nbreak" }
  [[backend.server]]
  name = "s"
  addr = "127.0.0.1:1"
"#;
    let text = errors(src);
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("auth.toml:7:8: userlist[1].name: userlist `ul` is defined twice"), "{text:#?}");
    assert!(has("userlist[1].users: a userlist without users lets nobody in"), "{text:#?}");
    assert!(has("auth.toml:14:21: frontend[0].auth.userlist: no userlist is named `nobody`"), "{text:#?}");
    assert!(has("auth.toml:17:37: frontend[0].rule[0].auth.realm: a realm is 1 to 200 printable ASCII"), "{text:#?}");
    assert!(has("auth.toml:21:10: frontend[0].rule[1].auth: `auth` cannot go with `redirect`, `deny`"), "{text:#?}");
    assert!(has("frontend[0].rule[2].auth.realm: a realm is"), "{text:#?}");
    assert!(has("backend[0].auth.realm: a realm is"), "{text:#?}");
    assert_eq!(text.len(), 7, "{text:#?}");

    // Unknown keys and missing ones are named by their path.
    let src = "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\nauth = { userlist = \"ul\", realmm = \"x\" }\n";
    let text = errors(src);
    assert!(
        text.iter().any(|t| t.contains("auth.toml:4:27: frontend[0].auth.realmm: unknown field `realmm`")),
        "{text:#?}"
    );
    assert!(text.iter().any(|t| t.contains("auth.toml:4:21: frontend[0].auth.userlist: no userlist")), "{text:#?}");
    let src = "[[userlist]]\nname = \"ul\"\nusers = [{ name = \"u\", pasword = \"x\" }]\n";
    let text = errors(src);
    assert!(
        text.iter().any(|t| t.contains("auth.toml:3:24: userlist[0].users[0].pasword: unknown field `pasword`")),
        "{text:#?}"
    );
    assert!(text.iter().any(|t| t.contains("user `u` needs `password`")), "{text:#?}");
}

#[test]
fn failure_delay_is_a_duration_that_may_be_zero() {
    let with = |value: &str| {
        good().replacen("name = \"admins\"\n", &format!("name = \"admins\"\nfailure_delay = {value}\n"), 1)
    };
    for (value, want) in [("\"50ms\"", 50), ("\"2s\"", 2000), ("0", 0), ("150", 150)] {
        let c = parse(&with(value), Path::new("auth.toml")).unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(c.userlists[0].failure_delay, Duration::from_millis(want), "{value}");
        assert_eq!(c.userlists[1].failure_delay, Userlist::DEFAULT_FAILURE_DELAY, "the other list keeps the default");
    }
    for (value, why) in [("-5", "-5 is negative"), ("\"1.5s\"", ""), ("\"fast\"", "")] {
        let text = errors(&with(value));
        assert_eq!(text.len(), 1, "{text:#?}");
        assert!(text[0].contains("auth.toml:4:17: userlist[0].failure_delay: ") && text[0].contains(why), "{text:#?}");
    }
}
