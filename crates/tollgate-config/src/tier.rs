//! `peers` on a `[[cache]]` zone: a cache tier across instances. Each key
//! has one owner among the peers (rendezvous hashing over those that answer
//! their checks; the runtime's cache/tier.rs chooses). A miss for a key
//! another peer owns is sent to that peer, once, marked with
//! [`PEER_HEADER`]; the owner fetches it (coalescing requests for one key)
//! and stores it; the instance that asked passes the answer on without
//! storing it, so the fleet holds each response once.

use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePeers {
    /// This instance's address as a member.
    pub me: SocketAddr,
    /// The backend (made by the config, named `peers:<zone>`) whose servers
    /// are the other members (listed, or found in DNS by its `discover`;
    /// a server at `me` is this instance), checked every `check`.
    pub backend: usize,
}

/// The field a request sent to the owner carries (its value: the sender's
/// address in `list`). A request with it from a member's address is served
/// as the owner serves, never sent on; the field is removed either way.
pub const PEER_HEADER: &str = "tollgate-peer";

/// Default time between two checks of a peer.
pub const PEER_CHECK: Duration = Duration::from_secs(2);

/// `[global.peers]`: the instances that tables with `share` are counted
/// with. Each pushes what happened here to the others every
/// [`PEERS_PUSH`]; it listens for theirs on its own address in `list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers {
    pub list: Vec<SocketAddr>,
    /// This instance's place in `list`.
    pub me: usize,
}

impl Peers {
    pub fn me(&self) -> SocketAddr {
        self.list[self.me]
    }
}

/// How often what happened here goes to the other peers.
pub const PEERS_PUSH: Duration = Duration::from_millis(100);

/// The name of the backend of `zone`'s peers.
pub fn backend_name(zone: &str) -> String {
    format!("peers:{zone}")
}

#[cfg(test)]
mod tests {
    use crate::{CheckKind, Config, ConfigErrors};
    use std::path::Path;
    use std::time::Duration;

    fn parse(peers: &str, bind: &str) -> Result<Config, ConfigErrors> {
        crate::parse(
            &format!(
                "[[cache]]\nname = \"main\"\npeers = {{ {peers} }}\n\
                 [[frontend]]\nname = \"web\"\nbind = [\"{bind}\"]\ndefault_backend = \"app\"\n\
                 [[backend]]\nname = \"app\"\ncache = {{ zone = \"main\" }}\n"
            ),
            Path::new("tier.toml"),
        )
    }

    const LIST: &str = "list = [\"10.0.0.1:80\", \"10.0.0.2:80\", \"10.0.0.3:80\"]";

    #[test]
    fn members_this_instance_and_the_backend_of_the_others() {
        // This instance: the member one of the binds is.
        let c = parse(LIST, "10.0.0.2:80").unwrap();
        let p = c.caches[0].peers.as_ref().unwrap();
        assert_eq!((p.me.to_string(), p.backend), ("10.0.0.2:80".to_string(), 1));
        let be = &c.backends[p.backend];
        assert_eq!(be.name, "peers:main");
        let names: Vec<&str> = be.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10.0.0.1:80", "10.0.0.3:80"]);
        let check = be.check.as_ref().unwrap();
        assert_eq!((&check.kind, check.interval, be.cache), (&CheckKind::Tcp, Duration::from_secs(2), None));
        // Or the one `self` names; `check` sets the checks' interval.
        let c = parse(&format!("{LIST}, self = \"10.0.0.3:80\", check = \"500ms\""), "0.0.0.0:80").unwrap();
        let p = c.caches[0].peers.as_ref().unwrap();
        assert_eq!(p.me.to_string(), "10.0.0.3:80");
        assert_eq!(c.backends[p.backend].check.as_ref().unwrap().interval, Duration::from_millis(500));
        // Members found in DNS: the backend discovers them; this one is the
        // bind on that port.
        let c = parse("dns = \"tollgate.internal:80\", every = \"5s\"", "10.0.0.7:80").unwrap();
        let p = c.caches[0].peers.as_ref().unwrap();
        let be = &c.backends[p.backend];
        let d = be.discover.as_deref().unwrap();
        assert_eq!(
            (p.me.to_string(), be.servers.len(), d.every),
            ("10.0.0.7:80".to_string(), 0, Duration::from_secs(5))
        );
        assert_eq!(d.source.to_string(), "tollgate.internal:80");
        assert!(d.server.check);
    }

    fn parse_peers(peers: &str, extra: &str) -> Result<Config, ConfigErrors> {
        crate::parse(
            &format!(
                "[global]\npeers = {{ {peers} }}\n[[table]]\nname = \"t\"\nkey = \"src\"\nshare = true\n\
                 [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\ndefault_backend = \"app\"\n\
                 [[backend]]\nname = \"app\"\nstick = {{ on = \"source\", share = true }}\n{extra}"
            ),
            Path::new("peers.toml"),
        )
    }

    #[test]
    fn global_peers_and_shared_tables() {
        let c = parse_peers("list = [\"10.0.0.1:10000\", \"10.0.0.2:10000\"], self = \"10.0.0.2:10000\"", "").unwrap();
        let p = c.global.peers.as_deref().unwrap();
        assert_eq!((p.me, p.me().to_string()), (1, "10.0.0.2:10000".to_string()));
        assert!(c.tables[0].share && c.backends[0].stick.unwrap().share);
        // Without `self`: the one member with an address of this host.
        let c = parse_peers("list = [\"127.0.0.1:10000\", \"198.51.100.1:10000\"]", "").unwrap();
        assert_eq!(c.global.peers.as_deref().unwrap().me, 0);
        for (peers, key, what) in [
            ("list = [\"10.0.0.1:1\"], self = \"10.0.0.1:1\"", "global.peers.list", "two peers or more"),
            ("list = [\"10.0.0.1:1\", \"x\"], self = \"10.0.0.1:1\"", "global.peers.list[1]", "not an IP:port"),
            (
                "list = [\"10.0.0.1:1\", \"10.0.0.2:1\"], self = \"10.0.0.3:1\"",
                "global.peers.self",
                "not one of `list`",
            ),
            (
                "list = [\"198.51.100.1:1\", \"198.51.100.2:1\"]",
                "global.peers",
                "no peer of `list` has an address of this host",
            ),
            ("list = [\"127.0.0.1:1\", \"127.0.0.2:1\"]", "global.peers", "several peers"),
        ] {
            let e = parse_peers(peers, "").unwrap_err().to_string();
            assert!(
                e.contains(key) && e.contains(what) && e.contains("peers.toml:"),
                "{peers}: `{key}` / `{what}` in {e}"
            );
        }
        // `share` without [global.peers].
        let e = crate::parse(
            "[[table]]\nname = \"t\"\nkey = \"src\"\nshare = true\n[[frontend]]\nname = \"web\"\n\
             bind = [\"127.0.0.1:80\"]\ndefault_backend = \"app\"\n[[backend]]\nname = \"app\"\nstick = { on = \"source\", share = true }\n",
            Path::new("peers.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("table[0].share") && e.contains("backend[0].stick.share") && e.contains("needs [global.peers]"),
            "{e}"
        );
    }

    #[test]
    fn mistakes_are_reported_with_their_keys() {
        for (peers, bind, key, what) in [
            (LIST, "0.0.0.0:80", "cache[0].peers", "no member is a bind"),
            ("list = [\"10.0.0.1:80\"]", "10.0.0.1:80", "cache[0].peers.list", "two members or more"),
            ("list = [\"10.0.0.1:80\", \"10.0.0.1:80\"]", "10.0.0.1:80", "cache[0].peers.list[1]", "listed twice"),
            ("list = [\"10.0.0.1:80\", \"edge-2:80\"]", "10.0.0.1:80", "cache[0].peers.list[1]", "not an IP:port"),
            (&format!("{LIST}, self = \"10.0.0.9:80\""), "10.0.0.1:80", "cache[0].peers.self", "not in `list`"),
            (&format!("{LIST}, check = \"soon\""), "10.0.0.1:80", "cache[0].peers.check", ""),
            (&format!("{LIST}, colour = 1"), "10.0.0.1:80", "colour", "unknown field"),
            ("dns = \"t.internal\"", "10.0.0.1:80", "cache[0].peers.dns", "not a host name and port"),
            (&format!("{LIST}, dns = \"t.internal:80\""), "10.0.0.1:80", "cache[0].peers.dns", "not both"),
            ("check = \"1s\"", "10.0.0.1:80", "cache[0].peers", "name the members"),
            (&format!("{LIST}, every = \"1s\""), "10.0.0.1:80", "cache[0].peers.every", "goes with `dns`"),
            ("dns = \"t.internal:80\"", "0.0.0.0:80", "cache[0].peers", "say which is this instance"),
        ] {
            let e = parse(peers, bind).unwrap_err().to_string();
            assert!(
                e.contains(key) && e.contains(what) && e.contains("tier.toml:"),
                "{peers}: `{key}` / `{what}` in {e}"
            );
        }
    }
}
