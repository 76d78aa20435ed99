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
//! - an unknown user name is checked against a dummy hash of the kind (scheme
//!   and cost) most of the list's users have, so that the time a 401 takes
//!   does not tell which names exist;
//! - a failed attempt gets its 401 no sooner than the list's `failure_delay`
//!   (default 300 ms) after the check began: a timer, not a blocked thread.
//!   That slows guessing down and, as long as a check takes less than the
//!   delay, hides how long it took (the hash's kind, a name that is unknown).
//!
//! `insecure_password`s are compared in constant time, on the event loop.

use crate::pipeline::rescue::ProxyError;
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
use tollgate_wire::h1::Fields;

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
    /// What a name that is not in the list is checked against: see [`dummy_for`].
    dummy: Password,
    /// Hash checks run, passed or not, per scheme: bcrypt, SHA-256 crypt,
    /// SHA-512 crypt (see [`scheme_index`]).
    checks: [AtomicU64; 3],
}

impl UserlistRt {
    fn new(cfg: Arc<Userlist>) -> UserlistRt {
        let passed = cfg.users.iter().map(|_| Mutex::new(None)).collect();
        let dummy = dummy_for(&cfg.users);
        UserlistRt { cfg, key: RandomState::new(), passed, dummy, checks: Default::default() }
    }

    /// How many bcrypt or SHA-crypt checks this list has run (remembered
    /// passwords and insecure ones cost none).
    pub fn hash_checks(&self) -> u64 {
        self.checks.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// How many checks of `scheme` (`bcrypt`, `sha256-crypt`, `sha512-crypt`,
    /// as [`Password::scheme`] names them) this list has run: what the tests
    /// of the dummy hashes count (the counters themselves sum to
    /// [`Self::hash_checks`]).
    #[cfg(test)]
    pub(crate) fn hash_checks_of(&self, scheme: &str) -> u64 {
        let i = ["bcrypt", "sha256-crypt", "sha512-crypt"].iter().position(|s| *s == scheme);
        i.map_or(0, |i| self.checks[i].load(Ordering::Relaxed))
    }

    fn tag(&self, password: &[u8]) -> Tag {
        [self.key.hash_one((0u8, password)), self.key.hash_one((1u8, password))]
    }

    fn remembered(&self, user: usize, password: &[u8]) -> bool {
        *self.passed[user].lock() == Some(self.tag(password))
    }

    /// Whether `user` and `password` are one of the list's users and its
    /// password. `Err` when too many checks already wait.
    ///
    /// A name that is not in the list takes the same path as one that is, with
    /// [`Self::dummy`] for its password, and never passes.
    async fn verify(self: &Arc<Self>, user: &[u8], password: &[u8]) -> Result<bool, ProxyError> {
        let found = self.cfg.users.iter().position(|u| u.name.as_bytes() == user);
        let stored = found.map_or(&self.dummy, |i| &self.cfg.users[i].password);
        if let Password::Insecure(p) = stored {
            return Ok(constant_time_eq(password, p.as_bytes()) && found.is_some());
        }
        let remembered = |password| found.is_some_and(|i| self.remembered(i, password));
        if remembered(password) {
            return Ok(true);
        }
        if password.len() > MAX_PASSWORD {
            return Ok(false);
        }
        let _permit = limiter().enter().await.ok_or(ProxyError::AuthBusy)?;
        if remembered(password) {
            // It passed on another connection while this one waited.
            return Ok(true);
        }
        if let Some(i) = scheme_index(stored) {
            self.checks[i].fetch_add(1, Ordering::Relaxed);
        }
        let (stored, pw) = (stored.clone(), password.to_vec());
        let matched = tokio::task::spawn_blocking(move || password_matches(&stored, &pw)).await.unwrap_or_else(|e| {
            tracing::warn!(userlist = %self.cfg.name, "password check failed: {e}");
            false
        });
        let passed = matched && found.is_some();
        if let (true, Some(i)) = (passed, found) {
            *self.passed[i].lock() = Some(self.tag(password));
        }
        Ok(passed)
    }
}

/// The index of `p`'s scheme in [`UserlistRt::checks`]; `None` for insecure.
fn scheme_index(p: &Password) -> Option<usize> {
    match p {
        Password::Bcrypt(_) => Some(0),
        Password::Sha256Crypt(_) => Some(1),
        Password::Sha512Crypt(_) => Some(2),
        Password::Insecure(_) => None,
    }
}

/// What decides how long checking `p` takes: its scheme and cost (bcrypt's
/// cost, SHA-crypt's rounds, 5000 when the hash does not say).
fn cost_of(p: &Password) -> (&'static str, u32) {
    let cost = match p {
        Password::Bcrypt(h) => h.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(0),
        Password::Sha256Crypt(h) | Password::Sha512Crypt(h) => h
            .get(3..)
            .and_then(|r| r.strip_prefix("rounds="))
            .and_then(|r| r.split_once('$'))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or(5000),
        Password::Insecure(_) => 0,
    };
    (p.scheme(), cost)
}

/// The password a name that is not in `users` is checked against: a hash of
/// the scheme and cost that most of them have (on a tie, the one met first),
/// so that an unknown name costs what a known one with a wrong password does.
/// It is that kind's first user's hash with its digest replaced by zeros,
/// which the crates check in full (a well-formed hash) and no password
/// matches. When most users have an `insecure_password`, an unknown name is
/// compared as those are, against a made-up password.
fn dummy_for(users: &[tollgate_config::User]) -> Password {
    let mut count = std::collections::HashMap::new();
    for u in users {
        *count.entry(cost_of(&u.password)).or_insert(0usize) += 1;
    }
    // max_by_key keeps the last of equals: go through the users backwards.
    let most = users.iter().rev().max_by_key(|u| count.get(&cost_of(&u.password))).map(|u| &u.password);
    let zeroed = |h: &str, digest: usize| {
        let cut = h.len().saturating_sub(digest);
        h.get(..cut).map(|head| format!("{head}{}", ".".repeat(digest)))
    };
    let dummy = match most {
        Some(Password::Bcrypt(h)) => zeroed(h, 31).map(Password::Bcrypt),
        Some(Password::Sha256Crypt(h)) => zeroed(h, 43).map(Password::Sha256Crypt),
        Some(Password::Sha512Crypt(h)) => zeroed(h, 86).map(Password::Sha512Crypt),
        Some(Password::Insecure(_)) | None => None,
    };
    dummy.unwrap_or_else(|| Password::Insecure("\u{0}not a password\u{0}".into()))
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
pub struct Credentials {
    raw: Vec<u8>,
    colon: usize,
}

impl Credentials {
    pub fn user(&self) -> &[u8] {
        &self.raw[..self.colon]
    }

    pub fn password(&self) -> &[u8] {
        &self.raw[self.colon + 1..]
    }
}

/// Reads `Basic base64(user:password)` (the scheme in any case); `None` for
/// another scheme, bad base64 or no `:`.
pub fn basic_credentials(value: &[u8]) -> Option<Credentials> {
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
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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
    let started = tokio::time::Instant::now();
    let pass = async |p: &AuthPolicy| {
        let list = &auth.lists[p.userlist];
        let Some(c) = &credentials else {
            return Err(ProxyError::Unauthorized { challenge: challenge(&p.realm), reason: "auth-required" });
        };
        if !passes(list, c, started, (client, fe), "basic auth failed").await? {
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

/// A forward proxy's authentication (RFC 9110 section 11.7.1): the
/// `Proxy-Authorization` field against `policy`'s userlist, as [`check`] does
/// for `Authorization`; a request without it, or with a wrong one, gets 407
/// with `Proxy-Authenticate`.
pub async fn check_proxy(
    auth: &AuthRt,
    fe: &Frontend,
    policy: &AuthPolicy,
    fields: &Fields,
    client: SocketAddr,
) -> Result<(), ProxyError> {
    let started = tokio::time::Instant::now();
    let challenge = || challenge(&policy.realm);
    let credentials = {
        let mut values = fields.get_all(b"proxy-authorization");
        match (values.next(), values.next()) {
            (Some(v), None) => basic_credentials(v),
            _ => None,
        }
    };
    let Some(c) = credentials else {
        return Err(ProxyError::ProxyAuth { challenge: challenge(), reason: "proxy-auth-required" });
    };
    if !passes(&auth.lists[policy.userlist], &c, started, (client, fe), "proxy auth failed").await? {
        return Err(ProxyError::ProxyAuth { challenge: challenge(), reason: "proxy-auth-failed" });
    }
    Ok(())
}

/// Whether credentials `c` are a user's of `list`. A failure is logged (with
/// the user name, as `what`) and returned no sooner than the list's
/// `failure_delay` after `started`: that slows guessing down, and answers a
/// failure in the same time whatever it took (on a timer: the worker goes on
/// meanwhile).
async fn passes(
    list: &Arc<UserlistRt>,
    c: &Credentials,
    started: tokio::time::Instant,
    (client, fe): (SocketAddr, &Frontend),
    what: &str,
) -> Result<bool, ProxyError> {
    if list.verify(c.user(), c.password()).await? {
        return Ok(true);
    }
    let user = String::from_utf8_lossy(&c.user()[..c.user().len().min(64)]).into_owned();
    tracing::info!(
        client = %client, frontend = %fe.name, userlist = %list.cfg.name, user = %user.escape_debug(), "{what}"
    );
    tokio::time::sleep_until(started + list.cfg.failure_delay).await;
    Ok(false)
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
