//! A stick table on the source address (HAProxy's `stick on src`), for clients
//! that send no cookie (the cookie codec is `tollgate_wire::cookie`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;
use tollgate_config::StickPolicy;

/// Source address -> server, shared by every worker; entries expire `expire`
/// after the client's last request. Bounded: when full, expired entries go first,
/// then whichever entry comes first.
#[derive(Debug)]
pub struct StickTable {
    policy: StickPolicy,
    map: Mutex<HashMap<IpAddr, (usize, Instant)>>,
    /// Entries new or sent elsewhere since the peers last heard (`share`).
    unsent: Mutex<Vec<(IpAddr, usize)>>,
}

/// The most entries kept for the peers between two pushes.
const MAX_UNSENT: usize = 100_000;

impl StickTable {
    pub fn new(policy: StickPolicy) -> Self {
        StickTable { policy, map: Mutex::new(HashMap::new()), unsent: Mutex::default() }
    }

    /// The server index `src` is stuck to, if its entry has not expired.
    pub fn get(&self, src: IpAddr, now: Instant) -> Option<usize> {
        let map = self.map.lock();
        let (server, at) = *map.get(&src)?;
        (now.saturating_duration_since(at) <= self.policy.expire).then_some(server)
    }

    /// Records (or refreshes) `src` -> `server`; a new entry, or one that
    /// changed server, is for the peers too when the table is shared.
    pub fn put(&self, src: IpAddr, server: usize, now: Instant) {
        let was = self.record(src, server, now);
        if self.policy.share && was != Some(server) {
            let mut unsent = self.unsent.lock();
            if unsent.len() < MAX_UNSENT {
                unsent.push((src, server));
            }
        }
    }

    /// The entries new or changed since the last call, for the peers.
    pub fn take_unsent(&self) -> Vec<(IpAddr, usize)> {
        std::mem::take(&mut *self.unsent.lock())
    }

    /// An entry a peer made: recorded here (not sent back).
    pub fn put_here(&self, src: IpAddr, server: usize, now: Instant) {
        self.record(src, server, now);
    }

    /// Records `src` -> `server` (dropping expired entries, then any one, when
    /// full); returns the server it had.
    fn record(&self, src: IpAddr, server: usize, now: Instant) -> Option<usize> {
        let mut map = self.map.lock();
        if map.len() >= self.policy.size && !map.contains_key(&src) {
            let expire = self.policy.expire;
            map.retain(|_, (_, at)| now.saturating_duration_since(*at) <= expire);
            if map.len() >= self.policy.size
                && let Some(k) = map.keys().next().copied()
            {
                map.remove(&k);
            }
        }
        map.insert(src, (server, now)).map(|(s, _)| s)
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries still valid at `now`, by address: each client's server
    /// (its index) and how long the entry has left.
    pub fn entries(&self, now: Instant) -> Vec<(IpAddr, usize, std::time::Duration)> {
        let expire = self.policy.expire;
        let map = self.map.lock();
        let mut out: Vec<_> = map
            .iter()
            .filter_map(|(ip, (server, at))| {
                let left = expire.checked_sub(now.saturating_duration_since(*at))?;
                Some((*ip, *server, left))
            })
            .collect();
        out.sort_by_key(|e| e.0);
        out
    }

    /// A copy under `policy` for a new list of servers: each entry whose
    /// server is still there (`map`: old index -> new index) kept, with its
    /// time (a reload, a server added or deleted at run time).
    pub fn remapped(&self, policy: StickPolicy, map: impl Fn(usize) -> Option<usize>) -> Self {
        let entries = self.map.lock().iter().filter_map(|(ip, (i, at))| Some((*ip, (map(*i)?, *at)))).collect();
        StickTable { policy, map: Mutex::new(entries), unsent: Mutex::default() }
    }

    /// The most entries kept (`size`).
    pub fn size(&self) -> usize {
        self.policy.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stick_table_expires_and_stays_bounded() {
        let t = StickTable::new(StickPolicy { expire: Duration::from_secs(10), size: 2, share: false });
        let now = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        t.put(a, 1, now);
        assert_eq!(t.get(a, now + Duration::from_secs(10)), Some(1));
        assert_eq!(t.get(a, now + Duration::from_secs(11)), None);
        t.put(b, 0, now + Duration::from_secs(11));
        t.put(c, 1, now + Duration::from_secs(12));
        assert_eq!(t.len(), 2, "the expired entry made room");
        assert_eq!(t.get(c, now + Duration::from_secs(12)), Some(1));
        // `show table`: the valid entries by address, with the time each has left.
        assert_eq!(
            t.entries(now + Duration::from_secs(12)),
            [(b, 0, Duration::from_secs(9)), (c, 1, Duration::from_secs(10))]
        );
        assert_eq!(t.entries(now + Duration::from_secs(22)), [(c, 1, Duration::ZERO)]);
        assert!(t.entries(now + Duration::from_secs(23)).is_empty());
        assert_eq!(t.size(), 2);
    }

    /// Servers added or deleted: the entries of the servers still there
    /// follow them to their new places, with their times.
    #[test]
    fn remapped_keeps_the_entries_of_servers_still_there() {
        let policy = StickPolicy { expire: Duration::from_secs(10), size: 10, share: false };
        let t = StickTable::new(policy);
        let now = Instant::now();
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        t.put(a, 0, now);
        t.put(b, 1, now);
        t.put(c, 2, now);
        // Server 1 deleted: 2 becomes 1.
        let r = t.remapped(policy, |i| match i {
            0 => Some(0),
            2 => Some(1),
            _ => None,
        });
        assert_eq!(r.entries(now), [(a, 0, Duration::from_secs(10)), (c, 1, Duration::from_secs(10))]);
    }
}
