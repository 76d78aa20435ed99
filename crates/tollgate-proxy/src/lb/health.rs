//! A server's health with HAProxy's semantics, as the balancer reads it (the
//! active checker that feeds it is check.rs).
//!
//! - [`HealthState`] is the pure state machine of one server: consecutive passed and
//!   failed checks against `rise` and `fall`, UP or DOWN, the last result and when
//!   the state last changed. It returns a [`Transition`] when the state flips.
//! - [`PassiveCounter`] counts consecutive failed requests (connection errors,
//!   5xx); reaching `observe.errors` takes the server DOWN, and only active checks
//!   bring it back (`rise` passed checks).
//! - [`ServerHealth`] is the health part of a server at run time: the state under
//!   a lock, and the verdicts of active checks and of the data path applied in
//!   order.
//!
//! A server's `up` flag (lb/mod.rs) is what selection reads; it is written only
//! through [`ServerHealth::apply`] and [`ServerHealth::observe`], under the
//! server's health lock, so that active and passive verdicts apply in order.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tollgate_config::{Backend, Server};

/// UP takes traffic; DOWN does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    Down,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Up => "UP",
            Health::Down => "DOWN",
        }
    }
}

/// The result of one active check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub ok: bool,
    /// What was seen: "HTTP status 200", "TCP connect ok", "connection refused",
    /// "timeout after 1s", ...
    pub text: String,
    pub duration: Duration,
    /// The check could not be made for a reason of Tollgate's own (out of file
    /// descriptors, memory or local ports: limits.rs): it says nothing about
    /// the server, and [`HealthState::record`] counts it neither way.
    pub local: bool,
}

/// A change of a server's state, to be logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub to: Health,
    /// Why: the deciding check's text, or the passive count.
    pub reason: String,
    /// The deciding check's duration (`None` for a passive verdict).
    pub duration: Option<Duration>,
}

/// One server's health, as a pure state machine (no I/O, no clock of its own).
#[derive(Debug, Clone)]
pub struct HealthState {
    fall: u32,
    rise: u32,
    health: Health,
    /// No check result yet: the first one alone decides the state.
    initial: bool,
    successes: u32,
    failures: u32,
    last: Option<CheckResult>,
    changed_at: Instant,
    checks: u64,
    failed_checks: u64,
    downs: u64,
}

impl HealthState {
    /// A server not checked yet: UP until its first result says otherwise.
    pub fn new(fall: u32, rise: u32, now: Instant) -> Self {
        HealthState {
            fall: fall.max(1),
            rise: rise.max(1),
            health: Health::Up,
            initial: true,
            successes: 0,
            failures: 0,
            last: None,
            changed_at: now,
            checks: 0,
            failed_checks: 0,
            downs: 0,
        }
    }

    /// Takes one active check's result. The first result sets the state by itself;
    /// after that an UP server goes DOWN after `fall` consecutive failures, a DOWN
    /// one UP after `rise` consecutive successes. A check that failed locally
    /// ([`CheckResult::local`]) changes nothing: neither count, nor the state,
    /// nor whether the next result is the first; it is only shown as the last.
    pub fn record(&mut self, result: CheckResult, now: Instant) -> Option<Transition> {
        if result.local {
            self.last = Some(result);
            return None;
        }
        self.checks += 1;
        if result.ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failed_checks += 1;
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let target = if std::mem::take(&mut self.initial) {
            if result.ok { Health::Up } else { Health::Down }
        } else {
            match self.health {
                Health::Up if self.failures >= self.fall => Health::Down,
                Health::Down if self.successes >= self.rise => Health::Up,
                h => h,
            }
        };
        let transition = (target != self.health).then(|| Transition {
            to: target,
            reason: result.text.clone(),
            duration: Some(result.duration),
        });
        self.last = Some(result);
        if transition.is_some() {
            self.flip(target, now);
        }
        transition
    }

    /// A passive verdict: the server goes DOWN now and needs `rise` passed checks
    /// to come back. Nothing happens to a server already DOWN.
    pub fn mark_down(&mut self, reason: String, now: Instant) -> Option<Transition> {
        if self.health == Health::Down {
            return None;
        }
        self.successes = 0;
        self.flip(Health::Down, now);
        Some(Transition { to: Health::Down, reason, duration: None })
    }

    /// A server whose name does not resolve: DOWN, `why` as its last result.
    /// Once the name resolves, the server is a new one (a fresh state).
    pub fn unresolved(mut self, why: String) -> Self {
        self.health = Health::Down;
        self.initial = false;
        self.last = Some(CheckResult { ok: false, text: why, duration: Duration::ZERO, local: false });
        self
    }

    /// The same state under new `fall` and `rise` (a reload that changed them):
    /// the consecutive counts carry on and are judged by the new thresholds at the
    /// next check.
    pub fn with_thresholds(mut self, fall: u32, rise: u32) -> Self {
        self.fall = fall.max(1);
        self.rise = rise.max(1);
        self
    }

    /// No check result yet: the next one alone decides the state.
    pub fn is_initial(&self) -> bool {
        self.initial
    }

    fn flip(&mut self, to: Health, now: Instant) {
        self.health = to;
        self.changed_at = now;
        if to == Health::Down {
            self.downs += 1;
        }
    }

    pub fn health(&self) -> Health {
        self.health
    }
    pub fn last(&self) -> Option<&CheckResult> {
        self.last.as_ref()
    }
    pub fn changed_at(&self) -> Instant {
        self.changed_at
    }
    pub fn consecutive_successes(&self) -> u32 {
        self.successes
    }
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }
}

/// Consecutive failed requests to one server (passive checks). Relaxed atomics:
/// every worker reports into it, and a success costs one load when the count is 0.
#[derive(Debug)]
pub struct PassiveCounter {
    errors: AtomicU32,
    limit: u32,
}

impl PassiveCounter {
    pub fn new(limit: u32) -> Self {
        PassiveCounter { errors: AtomicU32::new(0), limit: limit.max(1) }
    }

    /// Counts one request's outcome; true when this failure reaches the limit (the
    /// count then starts again from 0).
    pub fn observe(&self, ok: bool) -> bool {
        if ok {
            if self.errors.load(Ordering::Relaxed) != 0 {
                self.errors.store(0, Ordering::Relaxed);
            }
            return false;
        }
        let n = self.errors.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if n >= self.limit {
            self.errors.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Consecutive failures counted so far.
    pub fn errors(&self) -> u32 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    fn reset(&self) {
        self.errors.store(0, Ordering::Relaxed);
    }
}

/// The health part of a [`ServerRt`](super::ServerRt).
#[derive(Debug)]
pub struct ServerHealth {
    backend: String,
    server: String,
    /// Active checks run for this server.
    checked: bool,
    state: Mutex<HealthState>,
    passive: Option<PassiveCounter>,
}

impl ServerHealth {
    pub fn new(server: &Server, backend: &Backend) -> Self {
        let checked = server.check && backend.check.is_some();
        let (fall, rise) = backend.check.as_ref().map_or((1, 1), |c| (c.fall, c.rise));
        let mut state = HealthState::new(fall, rise, Instant::now());
        if let Some(why) = &server.unresolved {
            state = state.unresolved(format!("DNS: {why}"));
        }
        ServerHealth {
            backend: backend.name.clone(),
            server: server.name.clone(),
            checked,
            state: Mutex::new(state),
            // A server without active checks could never come back: no passive ones.
            passive: backend.observe.filter(|_| checked).map(|o| PassiveCounter::new(o.errors)),
        }
    }

    /// The health of a server kept across a reload: the running server's state
    /// (UP or DOWN, counts, last check) under the new config's `fall` and `rise`.
    /// The passive count starts again from 0.
    pub fn carried(server: &Server, backend: &Backend, old: &ServerHealth) -> Self {
        let fresh = ServerHealth::new(server, backend);
        let (fall, rise) = backend.check.as_ref().map_or((1, 1), |c| (c.fall, c.rise));
        let state = old.state.lock().clone().with_thresholds(fall, rise);
        ServerHealth { state: Mutex::new(state), ..fresh }
    }

    /// Active checks run for this server.
    pub fn checked(&self) -> bool {
        self.checked
    }

    /// A checked server with no check result yet: the checker's first round decides it.
    pub fn needs_first_check(&self) -> bool {
        self.checked && self.state.lock().is_initial()
    }

    /// The backend this server belongs to.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The health, last check, time since the last change and check counters,
    /// as [`ServerRt::check_status`](super::ServerRt::check_status) reports them.
    pub fn status(&self) -> CheckStatus {
        let st = self.state.lock();
        CheckStatus {
            checked: self.checked,
            observed: self.passive.is_some(),
            health: st.health,
            last: st.last.clone(),
            since_change: st.changed_at.elapsed(),
            consecutive_successes: st.successes,
            consecutive_failures: st.failures,
            checks: st.checks,
            failed_checks: st.failed_checks,
            downs: st.downs,
            passive_errors: self.passive.as_ref().map_or(0, PassiveCounter::errors),
        }
    }

    /// Passive checks: one request's outcome (`ok` false for a connection error
    /// or a 5xx). Enough consecutive failures take the server DOWN (see
    /// [`PassiveCounter`]); `set_up` is called under the health lock.
    pub fn observe(&self, ok: bool, set_up: impl FnOnce(bool)) {
        let Some(p) = &self.passive else { return };
        if !p.observe(ok) {
            return;
        }
        let reason = format!("{} consecutive errors (passive)", p.limit());
        let mut st = self.state.lock();
        if let Some(t) = st.mark_down(reason, Instant::now()) {
            set_up(false);
            drop(st);
            self.log_transition(&t);
        }
    }

    /// Applies an active check's result; `set_up` is called under the health
    /// lock when the state flips.
    /// A verdict of the data path that needs no count (a cache tier member
    /// that did not connect): DOWN now, back after `rise` passed checks.
    pub fn mark_down(&self, reason: String, set_up: impl FnOnce(bool)) {
        let mut st = self.state.lock();
        if let Some(t) = st.mark_down(reason, Instant::now()) {
            set_up(false);
            drop(st);
            self.log_transition(&t);
        }
    }

    pub fn apply(&self, result: CheckResult, set_up: impl FnOnce(bool)) {
        let mut st = self.state.lock();
        let t = st.record(result, Instant::now());
        if let Some(t) = &t {
            set_up(t.to == Health::Up);
            if t.to == Health::Up
                && let Some(p) = &self.passive
            {
                p.reset();
            }
        }
        drop(st);
        if let Some(t) = t {
            self.log_transition(&t);
        }
    }

    fn log_transition(&self, t: &Transition) {
        let (backend, name) = (&self.backend, &self.server);
        let took = t.duration.map_or_else(String::new, |d| format!(" (check took {} ms)", d.as_millis()));
        match t.to {
            Health::Down => tracing::warn!(
                backend = %backend,
                server = %name,
                reason = %t.reason,
                "server {backend}/{name} is DOWN: {}{took}",
                t.reason
            ),
            Health::Up => {
                tracing::info!(backend = %backend, server = %name, reason = %t.reason, "server {backend}/{name} is UP: {}{took}", t.reason)
            }
        }
    }
}

/// What the admin API and the stats page show about a server's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckStatus {
    /// Active checks run for this server.
    pub checked: bool,
    /// Passive checks (`observe`) apply to this server.
    pub observed: bool,
    pub health: Health,
    /// The last active check, if any ran.
    pub last: Option<CheckResult>,
    /// Time since the last change of state (or since start).
    pub since_change: Duration,
    pub consecutive_successes: u32,
    pub consecutive_failures: u32,
    /// Active checks run, and how many of them failed.
    pub checks: u64,
    pub failed_checks: u64,
    /// Times the server went DOWN (checks or passive).
    pub downs: u64,
    /// Consecutive failed requests counted by passive checks.
    pub passive_errors: u32,
}

impl CheckStatus {
    /// The last check as one line: "HTTP status 503 in 2 ms", or "-".
    pub fn last_text(&self) -> String {
        match &self.last {
            Some(r) => format!("{} in {} ms", r.text, r.duration.as_millis()),
            None => "-".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::BackendRt;
    use std::sync::Arc;

    fn ok(text: &str) -> CheckResult {
        CheckResult { ok: true, text: text.into(), duration: Duration::from_millis(3), local: false }
    }
    fn fail(text: &str) -> CheckResult {
        CheckResult { ok: false, text: text.into(), duration: Duration::from_millis(5), local: false }
    }
    /// What the checker reports for a check it could not make (check.rs).
    fn local() -> CheckResult {
        let text = "not run: this process is out of file descriptors (EMFILE)".into();
        CheckResult { ok: false, text, duration: Duration::ZERO, local: true }
    }

    /// A check this process could not make (EMFILE) is neither a pass nor a
    /// failure: with fall = 1, as many as come leave an UP server UP, do not
    /// break a run of failures or successes, and a first result that is local
    /// leaves the next one to decide.
    #[test]
    fn checks_failing_locally_count_neither_way() {
        let t0 = Instant::now();
        let mut first = HealthState::new(1, 1, t0);
        assert_eq!(first.record(local(), t0), None);
        assert!(first.is_initial(), "still waiting for a result that says something");
        assert_eq!(first.health(), Health::Up);

        let mut s = HealthState::new(1, 2, t0);
        s.record(ok("up"), t0);
        for _ in 0..10 {
            assert_eq!(s.record(local(), t0), None);
        }
        assert_eq!(
            (s.health(), s.consecutive_failures(), s.checks, s.failed_checks, s.downs),
            (Health::Up, 0, 1, 0, 0)
        );
        assert!(s.last().is_some_and(|r| r.local), "shown as the last check");
        // A real failure still counts, and a local one between two successes
        // does not break the run of `rise`.
        assert_eq!(s.record(fail("connection refused"), t0).map(|t| t.to), Some(Health::Down));
        assert_eq!(s.record(ok("up"), t0), None);
        assert_eq!(s.record(local(), t0), None);
        assert_eq!(s.record(ok("up"), t0).map(|t| t.to), Some(Health::Up));
    }

    fn backend(toml_server_extra: &str, check: &str, observe: &str) -> Arc<BackendRt> {
        let src = format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n[[backend]]\nname = \"b\"\n{check}\n{observe}\n\
             [[backend.server]]\nname = \"s1\"\naddr = \"127.0.0.1:1\"\n{toml_server_extra}\n"
        );
        let c = tollgate_config::parse(&src, std::path::Path::new("t.toml")).unwrap();
        BackendRt::new(c.backends[0].clone())
    }

    #[test]
    fn first_result_alone_decides() {
        let t0 = Instant::now();
        let mut up = HealthState::new(3, 2, t0);
        assert_eq!(up.record(ok("HTTP status 200"), t0), None, "starts UP: no change");
        assert_eq!(up.health(), Health::Up);

        let mut down = HealthState::new(3, 2, t0);
        let t = down.record(fail("connection refused"), t0).expect("one failure is enough at start");
        assert_eq!(t.to, Health::Down);
        assert_eq!(t.reason, "connection refused");
        assert_eq!(t.duration, Some(Duration::from_millis(5)));
        // Then `rise` passed checks are needed, as for any DOWN server.
        assert_eq!(down.record(ok("HTTP status 200"), t0), None);
        assert_eq!(down.record(ok("HTTP status 200"), t0).map(|t| t.to), Some(Health::Up));
    }

    #[test]
    fn fall_and_rise_count_consecutive_results() {
        let t0 = Instant::now();
        let mut s = HealthState::new(3, 2, t0);
        s.record(ok("up"), t0);
        // Two failures, a success: the count starts again.
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        assert_eq!(s.consecutive_failures(), 2);
        assert_eq!(s.record(ok("HTTP status 200"), t0), None);
        assert_eq!(s.consecutive_failures(), 0);
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        let t1 = t0 + Duration::from_secs(7);
        let t = s.record(fail("timeout after 1s"), t1).expect("third consecutive failure");
        assert_eq!((t.to, t.reason.as_str()), (Health::Down, "timeout after 1s"));
        assert_eq!(s.changed_at(), t1);
        // Further failures change nothing.
        assert_eq!(s.record(fail("timeout after 1s"), t1), None);
        // One success, one failure, then two successes: UP on the second of those.
        assert_eq!(s.record(ok("HTTP status 200"), t1), None);
        assert_eq!(s.record(fail("HTTP status 500"), t1), None);
        assert_eq!(s.record(ok("HTTP status 200"), t1), None);
        let t2 = t1 + Duration::from_secs(4);
        assert_eq!(s.record(ok("HTTP status 200"), t2).map(|t| t.to), Some(Health::Up));
        assert_eq!(s.changed_at(), t2);
        assert_eq!(s.last().map(|r| r.text.as_str()), Some("HTTP status 200"));
        assert_eq!((s.checks, s.failed_checks, s.downs), (12, 7, 1));
    }

    #[test]
    fn fall_and_rise_of_one_flip_at_once() {
        let t0 = Instant::now();
        let mut s = HealthState::new(1, 1, t0);
        s.record(ok("a"), t0);
        assert_eq!(s.record(fail("b"), t0).map(|t| t.to), Some(Health::Down));
        assert_eq!(s.record(ok("c"), t0).map(|t| t.to), Some(Health::Up));
    }

    #[test]
    fn passive_down_needs_rise_checks_to_come_back() {
        let t0 = Instant::now();
        let mut s = HealthState::new(3, 2, t0);
        for _ in 0..5 {
            s.record(ok("HTTP status 200"), t0);
        }
        let t = s.mark_down("3 consecutive errors (passive)".into(), t0).expect("UP server goes DOWN");
        assert_eq!((t.to, t.duration), (Health::Down, None));
        assert_eq!(s.mark_down("again".into(), t0), None, "already DOWN");
        // The successes before the verdict do not count towards rise.
        assert_eq!(s.record(ok("HTTP status 200"), t0), None);
        assert_eq!(s.record(ok("HTTP status 200"), t0).map(|t| t.to), Some(Health::Up));
    }

    #[test]
    fn passive_counter_counts_consecutive_failures() {
        let p = PassiveCounter::new(3);
        assert!(!p.observe(false));
        assert!(!p.observe(false));
        assert!(!p.observe(true), "a success starts the count again");
        assert_eq!(p.errors(), 0);
        assert!(!p.observe(false));
        assert!(!p.observe(false));
        assert!(p.observe(false), "third in a row");
        assert_eq!(p.errors(), 0, "the count restarts after a verdict");
        assert!(!p.observe(false));
    }

    #[test]
    fn observe_takes_a_checked_server_down_and_checks_bring_it_back() {
        let b = backend("", "check = { type = \"tcp\", fall = 3, rise = 2 }", "observe = { errors = 2 }");
        let s = &b.servers[0];
        s.apply_check(ok("TCP connect ok"));
        assert!(s.is_up());
        s.observe(false);
        assert!(s.is_up());
        s.observe(false);
        assert!(!s.is_up(), "2 consecutive errors");
        let st = s.check_status();
        assert_eq!((st.health, st.downs, st.checked, st.observed), (Health::Down, 1, true, true));
        s.apply_check(ok("TCP connect ok"));
        assert!(!s.is_up());
        s.apply_check(ok("TCP connect ok"));
        assert!(s.is_up(), "rise = 2");
        assert_eq!(s.check_status().last_text(), "TCP connect ok in 3 ms");

        // No passive checks without `observe`, nor for a server with check = false.
        let b = backend("", "check = { type = \"tcp\" }", "");
        for _ in 0..10 {
            b.servers[0].observe(false);
        }
        assert!(b.servers[0].is_up());
        let b = backend("check = false", "check = { type = \"tcp\" }", "observe = { errors = 1 }");
        b.servers[0].observe(false);
        assert!(b.servers[0].is_up());
        assert!(!b.servers[0].check_status().checked);
    }
}
