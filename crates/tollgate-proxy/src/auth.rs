//! HTTP Basic authentication (RFC 7617) against the config's `[[userlist]]`s.
//!
//! A request that goes to a backend must pass every `auth` that applies to it:
//! its frontend's, those of the rules it matched, its backend's ([`check`],
//! called by conn.rs once the backend is chosen). One that does not gets a 401
//! with `WWW-Authenticate: Basic realm="...", charset="UTF-8"` (rescue.rs).
//!
//! A bcrypt or SHA-crypt check costs milliseconds of CPU (bcrypt cost 10: about
//! 50 ms), so:
//! - it never runs on a worker's event loop but on the blocking pool, and at
//!   most [`Limiter`]'s permits at a time in the process (half the cores, at
//!   least one), so that a flood of wrong passwords leaves cores to proxying;
//!   when `WAITING_PER_PERMIT` times as many already wait, the request gets 503;
//! - a password that passed is remembered for its user as a keyed hash
//!   (SipHash with a random key per userlist, 128 bits), never as itself, so a
//!   keep-alive client sending the same header again costs a hash, not a
//!   bcrypt. One entry per user of the list: the cache is as large as the list.
//!   A failed check is not remembered;
//! - an unknown user name is checked against another user's hash, so that the
//!   time a 401 takes does not tell which names exist.
//!
//! `insecure_password`s are compared in constant time, on the event loop.

use crate::h1::Fields;
use crate::rescue::ProxyError;
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use parking_lot::Mutex;
use sha_crypt::{PasswordVerifier, ShaCrypt};
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::{Semaphore, SemaphorePermit};
use tollgate_config::{AuthPolicy, Backend, Config, Frontend, Password, Userlist};

/// Passwords longer than this are refused unchecked: SHA-crypt's work grows
/// with the password's length.
const MAX_PASSWORD: usize = 1024;
/// How many checks may wait for each permit of the [`Limiter`].
const WAITING_PER_PERMIT: usize = 64;

/// Standard base64, padded or not.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The userlists of one config, ready to check passwords (in a [`crate::Snapshot`]).
pub struct AuthRt {
    /// In the order of `Config::userlists`.
    lists: Vec<Arc<UserlistRt>>,
}

impl AuthRt {
    /// The userlists of `config`. One that `prev` has unchanged (same name,
    /// users and passwords) is carried over with the passwords it remembers.
    pub fn new(config: &Config, prev: Option<&AuthRt>) -> AuthRt {
        let lists = config
            .userlists
            .iter()
            .map(|l| match prev.and_then(|p| p.lists.iter().find(|r| *r.cfg == **l)) {
                Some(running) => running.clone(),
                None => Arc::new(UserlistRt::new(l.clone())),
            })
            .collect();
        AuthRt { lists }
    }

    pub fn userlist(&self, name: &str) -> Option<&Arc<UserlistRt>> {
        self.lists.iter().find(|l| l.cfg.name == name)
    }
}

/// A remembered password: its keyed hash.
type Tag = [u64; 2];

/// One userlist and the passwords that passed.
pub struct UserlistRt {
    cfg: Arc<Userlist>,
    key: RandomState,
    /// Per user, in the order of `cfg.users`: the password that last passed.
    passed: Vec<Mutex<Option<Tag>>>,
    /// Hash checks run (bcrypt, SHA-crypt), passed or not.
    checks: AtomicU64,
}

impl UserlistRt {
    fn new(cfg: Arc<Userlist>) -> UserlistRt {
        let passed = cfg.users.iter().map(|_| Mutex::new(None)).collect();
        UserlistRt { cfg, key: RandomState::new(), passed, checks: AtomicU64::new(0) }
    }

    /// How many bcrypt or SHA-crypt checks this list has run (remembered
    /// passwords and insecure ones cost none).
    pub fn hash_checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    fn tag(&self, password: &[u8]) -> Tag {
        [self.key.hash_one((0u8, password)), self.key.hash_one((1u8, password))]
    }

    fn remembered(&self, user: usize, password: &[u8]) -> bool {
        *self.passed[user].lock() == Some(self.tag(password))
    }

    /// Whether `user` and `password` are one of the list's users and its
    /// password. `Err` when too many checks already wait.
    async fn verify(self: &Arc<Self>, user: &[u8], password: &[u8]) -> Result<bool, ProxyError> {
        let found = self.cfg.users.iter().position(|u| u.name.as_bytes() == user);
        if let Some(i) = found {
            if let Password::Insecure(p) = &self.cfg.users[i].password {
                return Ok(constant_time_eq(password, p.as_bytes()));
            }
            if self.remembered(i, password) {
                return Ok(true);
            }
        }
        // An unknown name costs a check too, against a user that has a hash.
        let hashed = || self.cfg.users.iter().position(|u| !matches!(u.password, Password::Insecure(_)));
        let Some(against) = found.or_else(hashed) else { return Ok(false) };
        if password.len() > MAX_PASSWORD {
            return Ok(false);
        }
        let _permit = limiter().enter().await.ok_or(ProxyError::AuthBusy)?;
        if found.is_some() && self.remembered(against, password) {
            // It passed on another connection while this one waited.
            return Ok(true);
        }
        self.checks.fetch_add(1, Ordering::Relaxed);
        let (list, pw) = (self.clone(), password.to_vec());
        let matched = tokio::task::spawn_blocking(move || password_matches(&list.cfg.users[against].password, &pw))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(userlist = %self.cfg.name, "password check failed: {e}");
                false
            });
        let passed = matched && found.is_some();
        if passed {
            *self.passed[against].lock() = Some(self.tag(password));
        }
        Ok(passed)
    }
}

/// Checks `password` against a stored one: the slow part, for the blocking pool.
fn password_matches(stored: &Password, password: &[u8]) -> bool {
    match stored {
        Password::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
        Password::Sha256Crypt(h) | Password::Sha512Crypt(h) => {
            ShaCrypt::default().verify_password(password, h.as_str()).is_ok()
        }
        Password::Insecure(p) => constant_time_eq(password, p.as_bytes()),
    }
}

/// Bounds the CPU that password checks take: so many run at once, so many wait.
pub(crate) struct Limiter {
    permits: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// Counts one waiting check while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Limiter {
    pub(crate) fn new(permits: usize, max_waiting: usize) -> Limiter {
        Limiter { permits: Semaphore::new(permits), waiting: AtomicUsize::new(0), max_waiting }
    }

    /// A permit to run one check, after waiting for one if need be; `None` when
    /// `max_waiting` checks already wait.
    pub(crate) async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        if let Ok(p) = self.permits.try_acquire() {
            return Some(p);
        }
        let _waiting = Waiting(&self.waiting);
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.max_waiting {
            return None;
        }
        self.permits.acquire().await.ok()
    }
}

/// The process's limiter: half the cores check passwords at most.
fn limiter() -> &'static Limiter {
    static LIMITER: OnceLock<Limiter> = OnceLock::new();
    LIMITER.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let permits = (cores / 2).max(1);
        Limiter::new(permits, permits * WAITING_PER_PERMIT)
    })
}

/// The user name and password of an `Authorization: Basic ...` value.
pub(crate) struct Credentials {
    raw: Vec<u8>,
    colon: usize,
}

impl Credentials {
    pub(crate) fn user(&self) -> &[u8] {
        &self.raw[..self.colon]
    }

    pub(crate) fn password(&self) -> &[u8] {
        &self.raw[self.colon + 1..]
    }
}

/// Reads `Basic base64(user:password)` (the scheme in any case); `None` for
/// another scheme, bad base64 or no `:`.
pub(crate) fn basic_credentials(value: &[u8]) -> Option<Credentials> {
    let value = value.trim_ascii();
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, token) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let raw = BASE64.decode(token.trim_ascii_start()).ok()?;
    let colon = raw.iter().position(|b| *b == b':')?;
    Some(Credentials { raw, colon })
}

/// Compares without stopping at the first difference, so that the time taken
/// does not tell how much of a guess was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The WWW-Authenticate value for `realm` (a quoted-string: `"` and `\` escaped).
pub fn challenge(realm: &str) -> String {
    let mut quoted = String::with_capacity(realm.len());
    for c in realm.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    format!("Basic realm=\"{quoted}\", charset=\"UTF-8\"")
}

/// The hook conn.rs calls once a request's backend is chosen: the request must
/// pass the frontend's `auth`, those of the `rules` it matched and the
/// backend's, in that order; the first it does not pass answers 401 with its
/// realm. The Authorization field is removed when one of them says `strip`.
pub async fn check(
    auth: &AuthRt,
    fe: &Frontend,
    rules: &[&AuthPolicy],
    be: &Backend,
    fields: &mut Fields,
    client: SocketAddr,
) -> Result<(), ProxyError> {
    if fe.auth.is_none() && rules.is_empty() && be.auth.is_none() {
        return Ok(());
    }
    // Exactly one Authorization field: with two, the server might read the other.
    let credentials = {
        let mut values = fields.get_all(b"authorization");
        match (values.next(), values.next()) {
            (Some(v), None) => basic_credentials(v),
            _ => None,
        }
    };
    let mut strip = false;
    let pass = async |p: &AuthPolicy| {
        let list = &auth.lists[p.userlist];
        let Some(c) = &credentials else {
            return Err(ProxyError::Unauthorized { challenge: challenge(&p.realm), reason: "auth-required" });
        };
        if !list.verify(c.user(), c.password()).await? {
            let user = String::from_utf8_lossy(&c.user()[..c.user().len().min(64)]).into_owned();
            tracing::info!(
                client = %client, frontend = %fe.name, userlist = %list.cfg.name, user = %user.escape_debug(),
                "basic auth failed"
            );
            return Err(ProxyError::Unauthorized { challenge: challenge(&p.realm), reason: "auth-failed" });
        }
        Ok(p.strip)
    };
    if let Some(p) = &fe.auth {
        strip |= pass(p).await?;
    }
    for p in rules {
        strip |= pass(p).await?;
    }
    if let Some(p) = &be.auth {
        strip |= pass(p).await?;
    }
    if strip {
        fields.remove(b"authorization");
    }
    Ok(())
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
