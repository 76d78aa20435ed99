//! Which member of a cache tier owns a key (`peers` on a zone;
//! tollgate_config::tier has the rest). Rendezvous hashing (highest random
//! weight): each member scores the key, the highest score owns it. Every
//! instance computes the same owner from the same list (the hash is stable
//! across builds: tollgate_wire::hash); when a member is down, only its keys
//! move, each to the member that scored second for it.

use std::net::{IpAddr, SocketAddr};
use tollgate_wire::hash::hash_bytes;

/// A member's score for the key whose hash is `key`: the hash of the key's
/// hash, the member's address and its port (no allocation: this runs for
/// each member on each request of a tier).
fn score(key: u64, member: &SocketAddr) -> u64 {
    let mut bytes = [0u8; 8 + 16 + 2];
    bytes[..8].copy_from_slice(&key.to_le_bytes());
    let ip = match member.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    bytes[8..24].copy_from_slice(&ip);
    bytes[24..].copy_from_slice(&member.port().to_be_bytes());
    hash_bytes(&bytes)
}

/// The owner of `key` among this instance (`me`) and the other members
/// that answer (`others`: an index of the caller's and an address): the
/// index of the other member that owns it, or `None` when this one does.
pub fn owner(key: &[u8], me: SocketAddr, others: impl Iterator<Item = (usize, SocketAddr)>) -> Option<usize> {
    let k = hash_bytes(key);
    let rank = |m: &SocketAddr| (score(k, m), *m);
    let mut best = (rank(&me), None);
    for (i, m) in others.filter(|(_, m)| *m != me) {
        let r = rank(&m);
        if r > best.0 {
            best = (r, Some(i));
        }
    }
    best.1
}

/// [`owner`] over a whole `list` (the members that answer by `up`), as an
/// index in it: every member computes the same.
pub fn owner_in(key: &[u8], list: &[SocketAddr], me: usize, up: impl Fn(usize) -> bool) -> usize {
    let others = list.iter().copied().enumerate().filter(|(i, _)| *i != me && up(*i));
    owner(key, list[me], others).unwrap_or(me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Vec<SocketAddr> {
        ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"].iter().map(|s| s.parse().unwrap()).collect()
    }

    const PINNED: [usize; 8] = [2, 1, 1, 2, 1, 0, 0, 1];

    #[test]
    fn every_member_picks_the_same_owner_and_keys_spread() {
        let l = list();
        let mut counts = [0; 3];
        for k in 0..3000 {
            let key = format!("http://example.com/item/{k}");
            let o = owner_in(key.as_bytes(), &l, 0, |_| true);
            for me in 1..3 {
                assert_eq!(owner_in(key.as_bytes(), &l, me, |_| true), o, "the same owner whoever asks");
            }
            counts[o] += 1;
        }
        assert!(counts.iter().all(|c| *c > 850), "{counts:?}");
        // Pinned: an upgrade must not move keys.
        let owners: Vec<usize> = (0..8).map(|k| owner_in(format!("/p/{k}").as_bytes(), &l, 0, |_| true)).collect();
        assert_eq!(owners, PINNED);
    }

    #[test]
    fn a_down_member_gives_only_its_keys_to_the_others() {
        let l = list();
        for k in 0..1000 {
            let key = format!("/k/{k}");
            let all = owner_in(key.as_bytes(), &l, 0, |_| true);
            let without_2 = owner_in(key.as_bytes(), &l, 0, |i| i != 2);
            if all == 2 {
                assert_ne!(without_2, 2);
            } else {
                assert_eq!(without_2, all, "a key {all} owned does not move");
            }
            // This member is never down for itself.
            assert_eq!(owner_in(key.as_bytes(), &l, 2, |_| false), 2);
        }
    }
}
