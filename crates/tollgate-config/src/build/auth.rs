//! `[[userlist]]` and `auth`: HTTP Basic authentication (HAProxy's `userlist`,
//! `user ... password | insecure-password` and `http-request auth`).
//!
//! Password hashes are parsed here, when the config is loaded, so that a typo in
//! one is refused by `tollgate check` (naming the user, never the password),
//! rather than turning into a user who can never sign in. Checking a password
//! against a hash is the data path's business (tollgate-proxy's auth.rs).

use crate::build::{Builder, valid_name};
use crate::model::{AuthPolicy, Password, User, Userlist};
use crate::raw::{RawAuth, RawUserlist};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use toml::Spanned;

/// Userlist name -> index into `Config::userlists`.
pub(crate) type UserlistIndex = HashMap<String, usize>;

/// The alphabet of bcrypt's base64, in value order.
const BCRYPT_B64: &[u8] = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// The alphabet of crypt(3)'s base64 (SHA-crypt's salt and digest), in value order.
const CRYPT_B64: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// The longest realm accepted.
const MAX_REALM: usize = 200;

impl Builder<'_> {
    /// Every `[[userlist]]`, each user's password parsed.
    pub(crate) fn userlists(&mut self, raw: &[Spanned<RawUserlist>]) -> (Vec<Arc<Userlist>>, UserlistIndex) {
        let mut lists = Vec::new();
        let mut index = UserlistIndex::new();
        for (i, l) in raw.iter().enumerate() {
            let key = format!("userlist[{i}]");
            let list_span = l.span();
            let l = l.get_ref();
            let name = l.name.get_ref().clone();
            if !valid_name(&name) {
                self.err(
                    l.name.span(),
                    format!("{key}.name"),
                    format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
                );
            }
            if index.contains_key(&name) {
                self.err(l.name.span(), format!("{key}.name"), format!("userlist `{name}` is defined twice"));
            }
            if l.users.is_empty() {
                self.err(
                    list_span,
                    format!("{key}.users"),
                    "a userlist without users lets nobody in: give it at least one user",
                );
            }
            let mut users = Vec::new();
            let mut seen = HashSet::new();
            for (j, u) in l.users.iter().enumerate() {
                let ukey = format!("{key}.users[{j}]");
                let user_span = u.span();
                let u = u.get_ref();
                let uname = u.name.get_ref();
                if uname.is_empty() || uname.contains(':') || uname.chars().any(char::is_control) {
                    self.err(
                        u.name.span(),
                        format!("{ukey}.name"),
                        format!(
                            "`{}` cannot be a user name: Basic credentials are `name:password`, so a name is not empty and has no `:` or control character",
                            uname.escape_debug()
                        ),
                    );
                } else if !seen.insert(uname.clone()) {
                    self.err(
                        u.name.span(),
                        format!("{ukey}.name"),
                        format!("user `{uname}` is listed twice in userlist `{name}`"),
                    );
                }
                let password = match (&u.password, &u.insecure_password) {
                    (Some(p), None) => parse_password_hash(p.get_ref())
                        .map_err(|e| self.err(p.span(), format!("{ukey}.password"), format!("user `{uname}`: {e}")))
                        .ok(),
                    (None, Some(p)) if p.get_ref().is_empty() => {
                        self.err(
                            p.span(),
                            format!("{ukey}.insecure_password"),
                            format!("user `{uname}`: empty password"),
                        );
                        None
                    }
                    (None, Some(p)) => Some(Password::Insecure(p.get_ref().clone())),
                    (None, None) => {
                        self.err(
                            user_span,
                            ukey,
                            format!("user `{uname}` needs `password` (a hash) or `insecure_password`"),
                        );
                        None
                    }
                    (Some(_), Some(p)) => {
                        self.err(
                            p.span(),
                            format!("{ukey}.insecure_password"),
                            format!("user `{uname}` has both `password` and `insecure_password`: give one"),
                        );
                        None
                    }
                };
                if let Some(password) = password {
                    users.push(User { name: uname.clone(), password });
                }
            }
            // A bad value is reported (the config is refused).
            let failure_delay = l
                .failure_delay
                .as_ref()
                .and_then(|d| self.duration(d, &format!("{key}.failure_delay"), true))
                .unwrap_or(Userlist::DEFAULT_FAILURE_DELAY);
            index.entry(name.clone()).or_insert(lists.len());
            lists.push(Arc::new(Userlist { name, users, failure_delay }));
        }
        (lists, index)
    }

    /// An `auth` table; `default_realm` is the name of the frontend or backend.
    pub(crate) fn auth(
        &mut self,
        a: &Spanned<RawAuth>,
        key: &str,
        userlists: &UserlistIndex,
        default_realm: &str,
    ) -> Option<AuthPolicy> {
        let a = a.get_ref();
        let userlist = userlists.get(a.userlist.get_ref()).copied();
        if userlist.is_none() {
            self.err(
                a.userlist.span(),
                format!("{key}.userlist"),
                format!("no userlist is named `{}`", a.userlist.get_ref()),
            );
        }
        let realm = match &a.realm {
            None => Some(default_realm.to_string()),
            Some(r) => {
                let text = r.get_ref();
                if text.is_empty() || text.len() > MAX_REALM || !text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
                    self.err(
                        r.span(),
                        format!("{key}.realm"),
                        format!("a realm is 1 to {MAX_REALM} printable ASCII characters (browsers show it as is)"),
                    );
                    None
                } else {
                    Some(text.clone())
                }
            }
        };
        Some(AuthPolicy { userlist: userlist?, realm: realm?, strip: a.strip.unwrap_or(false) })
    }
}

/// Parses a password hash: bcrypt (`$2a$`, `$2b$`, `$2y$`), SHA-512 crypt
/// (`$6$`) or SHA-256 crypt (`$5$`), in the syntax their tools write. The error
/// never repeats the value (it may be a password written in the wrong key).
pub fn parse_password_hash(s: &str) -> Result<Password, String> {
    let supported = "use bcrypt (`htpasswd -nbB user password`) or SHA-512 crypt (`mkpasswd -m sha-512`)";
    let id = s.strip_prefix('$').and_then(|r| r.split_once('$')).map(|(id, _)| id);
    match id {
        Some("2a" | "2b" | "2y") => bcrypt_syntax(s).map(|()| Password::Bcrypt(s.to_string())),
        Some("5") => sha_crypt_syntax(&s[3..], 43).map(|()| Password::Sha256Crypt(s.to_string())),
        Some("6") => sha_crypt_syntax(&s[3..], 86).map(|()| Password::Sha512Crypt(s.to_string())),
        Some("2x" | "2") => Err(format!(
            "`${}$` bcrypt hashes come from old, buggy implementations and are not supported: {supported}",
            id.unwrap_or_default()
        )),
        Some("1" | "apr1") => Err(format!("MD5-crypt (`$1$`, `$apr1$`) is too weak and not supported: {supported}")),
        Some("y" | "7" | "gy") => Err(format!("yescrypt and scrypt hashes are not supported: {supported}")),
        Some(id) if !id.is_empty() && id.len() <= 12 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') => {
            Err(format!("`${id}$` hashes are not supported: {supported}"))
        }
        _ => Err(format!(
            "not a password hash (a hash starts with `$2b$`, `$2y$`, `$5$` or `$6$`): {supported}, or write a plain password as `insecure_password`"
        )),
    }
}

/// `$2b$10$` then 22 characters of salt (16 bytes) and 31 of hash (23 bytes),
/// in bcrypt's base64 with no spare bits set.
fn bcrypt_syntax(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.len() != 60 || b[6] != b'$' {
        return Err(format!(
            "a bcrypt hash is 60 characters, `$2b$` + 2-digit cost + `$` + 53 characters (this one has {})",
            s.chars().count()
        ));
    }
    let cost = std::str::from_utf8(&b[4..6]).ok().and_then(|c| c.parse::<u32>().ok()).filter(|c| (4..=31).contains(c));
    if cost.is_none() || !b[4..6].iter().all(u8::is_ascii_digit) {
        return Err("a bcrypt cost is two digits, 04 to 31".into());
    }
    let value = |c: u8| BCRYPT_B64.iter().position(|a| *a == c);
    let (salt, hash) = b[7..].split_at(22);
    if !b[7..].iter().all(|c| value(*c).is_some()) {
        return Err("a bcrypt salt and hash hold only `./A-Za-z0-9`".into());
    }
    // 22 characters carry 132 bits for 128 of salt, 31 carry 186 for 184 of hash.
    if value(salt[21]).is_some_and(|v| v & 0xf != 0) || value(hash[30]).is_some_and(|v| v & 0x3 != 0) {
        return Err("the bcrypt salt or hash is cut or altered (its last character is not one bcrypt writes)".into());
    }
    Ok(())
}

/// After `$5$` or `$6$`: `[rounds=N$]salt$digest`, with a salt of 1 to 16
/// characters and a digest of `digest_len`, both in crypt(3)'s base64.
fn sha_crypt_syntax(rest: &str, digest_len: usize) -> Result<(), String> {
    let mut fields: Vec<&str> = rest.split('$').collect();
    if let Some(rounds) = fields.first().and_then(|f| f.strip_prefix("rounds=")) {
        let n = rounds.bytes().all(|b| b.is_ascii_digit()).then(|| rounds.parse::<u32>().ok()).flatten();
        if !n.is_some_and(|n| (1_000..=999_999_999).contains(&n)) {
            return Err("SHA-crypt `rounds=` is a number from 1000 to 999999999".into());
        }
        fields.remove(0);
    }
    let [salt, digest] = fields[..] else {
        return Err("a SHA-crypt hash is `$6$salt$digest` or `$6$rounds=N$salt$digest`".into());
    };
    let crypt64 = |f: &str| f.bytes().all(|c| CRYPT_B64.contains(&c));
    if salt.is_empty() || salt.len() > 16 || !crypt64(salt) {
        return Err("a SHA-crypt salt is 1 to 16 characters of `./0-9A-Za-z`".into());
    }
    if digest.len() != digest_len || !crypt64(digest) {
        return Err(format!("this SHA-crypt digest should be {digest_len} characters of `./0-9A-Za-z`"));
    }
    // The last character carries the top bits of what is left over: 2 (64 bytes
    // in 86 characters) or 4 (32 bytes in 43).
    let top = if digest_len == 86 { 4 } else { 16 };
    let last = CRYPT_B64.iter().position(|a| *a == digest.as_bytes()[digest_len - 1]).unwrap_or(0);
    if last >= top {
        return Err("the SHA-crypt digest is cut or altered (its last character is not one crypt writes)".into());
    }
    Ok(())
}
