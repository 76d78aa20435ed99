//! Server names followed at run time, against a DNS server the test runs: a
//! name that does not resolve leaves its server DOWN (the config loads and the
//! others serve), brings it up when it resolves, moves it when its address
//! changes and takes it down when it is gone, all without a reload. Servers
//! discovered from SRV and A records (`discover`) come and go with the answer,
//! keep their state while they stay, and outlast an outage of the name server.

use crate::harness::*;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::runtime::control::ServerChange;

/// What the test's DNS server answers: A and SRV records by name (lower
/// case, no trailing dot); a name with neither gets NXDOMAIN, a name with
/// records of another type an empty answer. `silent`: no answer at all (an
/// outage).
#[derive(Default)]
struct Zone {
    a: HashMap<String, Vec<Ipv4Addr>>,
    /// priority, weight, port, target.
    srv: HashMap<String, Vec<(u16, u16, u16, String)>>,
    silent: bool,
}

/// A DNS server on UDP answering from its zone; `queries` counts the
/// questions it got (answered or not).
struct Dns {
    addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    queries: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Dns {
    fn set_a(&self, name: &str, ips: &[Ipv4Addr]) {
        self.zone.lock().unwrap().a.insert(name.into(), ips.to_vec());
    }
    fn remove_a(&self, name: &str) {
        self.zone.lock().unwrap().a.remove(name);
    }
    fn set_srv(&self, name: &str, records: &[(u16, u16, u16, &str)]) {
        let records = records.iter().map(|(p, w, port, t)| (*p, *w, *port, t.to_string())).collect();
        self.zone.lock().unwrap().srv.insert(name.into(), records);
    }
    fn remove_srv(&self, name: &str) {
        self.zone.lock().unwrap().srv.remove(name);
    }
    fn silent(&self, on: bool) {
        self.zone.lock().unwrap().silent = on;
    }
    /// Waits until the server has been asked `n` more questions than now.
    async fn asked(&self, n: u64) {
        let start = self.queries.load(Ordering::Relaxed);
        eventually("DNS questions", || self.queries.load(Ordering::Relaxed) >= start + n).await;
    }
}

fn answer(zone: &Zone, q: &hickory_proto::op::Query, r: &mut Message) {
    let name = q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
    let (a, srv) = (zone.a.get(&name), zone.srv.get(&name));
    if a.is_none() && srv.is_none() {
        r.set_response_code(ResponseCode::NXDomain);
        return;
    }
    match q.query_type() {
        RecordType::A => {
            for ip in a.into_iter().flatten() {
                r.add_answer(Record::from_rdata(q.name().clone(), 1, RData::A(A(*ip))));
            }
        }
        RecordType::SRV => {
            for (p, w, port, t) in srv.into_iter().flatten() {
                let Ok(target) = Name::from_ascii(format!("{t}.")) else { continue };
                r.add_answer(Record::from_rdata(q.name().clone(), 1, RData::SRV(SRV::new(*p, *w, *port, target))));
            }
        }
        _ => {}
    }
}

async fn dns() -> Dns {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let zone = Arc::new(Mutex::new(Zone::default()));
    let queries = Arc::new(AtomicU64::new(0));
    let (z, n) = (zone.clone(), queries.clone());
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((len, peer)) = sock.recv_from(&mut buf).await else { continue };
            let Ok(q) = Message::from_vec(&buf[..len]) else { continue };
            n.fetch_add(1, Ordering::Relaxed);
            let mut r = Message::new();
            r.set_id(q.id())
                .set_message_type(MessageType::Response)
                .set_op_code(q.op_code())
                .set_recursion_desired(q.recursion_desired())
                .set_recursion_available(true)
                .set_authoritative(true);
            r.add_queries(q.queries().to_vec());
            {
                let zone = z.lock().unwrap();
                if zone.silent {
                    continue;
                }
                if let Some(query) = q.queries().first() {
                    answer(&zone, query, &mut r);
                }
            }
            if let Ok(bytes) = r.to_vec() {
                let _ = sock.send_to(&bytes, peer).await;
            }
        }
    });
    Dns { addr, zone, queries, task }
}

/// An origin on `listener` answering every request with `tag`.
fn tagged(listener: TcpListener, tag: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let reply =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{tag}", tag.len());
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    })
}

/// Polls `cond` every 20 ms for at most 10 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_name_is_down_until_it_resolves_then_follows_its_address() {
    let d = dns().await;
    // `app` on 127.0.0.1 and 127.0.0.2, the same port; `fixed` by IP.
    let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = first.local_addr().unwrap().port();
    let Ok(second) = TcpListener::bind(("127.0.0.2", port)).await else {
        panic!("127.0.0.2:{port} is taken: the loopback network must be free for this test");
    };
    let _o1 = tagged(first, "one");
    let _o2 = tagged(second, "two");
    let fixed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fixed_addr = fixed.local_addr().unwrap();
    let _o3 = tagged(fixed, "fixed");
    let toml = format!(
        "[global]\nworkers = 1\ndns = {{ nameservers = [\"{}\"], timeout = \"500ms\" }}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\nresolve = {{ every = \"1s\" }}\n\
         \x20 [[backend.server]]\n  name = \"app\"\n  addr = \"app.tollgate.test:{port}\"\n\
         \x20 [[backend.server]]\n  name = \"fixed\"\n  addr = \"{fixed_addr}\"\n",
        d.addr
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let app = || p.snapshot().backend("b").unwrap().server("app").unwrap().clone();
    let bodies = || bodies(web, 4);

    // Loaded and serving, `app` DOWN with the reason.
    assert!(!app().is_up());
    let last = app().check_status().last.map(|r| r.text).unwrap_or_default();
    assert!(last.contains("DNS: no such name (NXDOMAIN)"), "{last}");
    assert_eq!(bodies().await, ["fixed"]);

    // It resolves: UP at that address, without a reload.
    d.set_a("app.tollgate.test", &[Ipv4Addr::new(127, 0, 0, 1)]);
    eventually("app comes up", || app().is_up()).await;
    assert_eq!(app().addr(), SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(bodies().await, ["fixed", "one"]);

    // Its address changes: the new one takes its requests.
    d.set_a("app.tollgate.test", &[Ipv4Addr::new(127, 0, 0, 2)]);
    eventually("app moves", || app().addr().ip() == Ipv4Addr::new(127, 0, 0, 2)).await;
    assert!(app().is_up());
    assert_eq!(bodies().await, ["fixed", "two"]);

    // Gone: DOWN again, the others serve.
    d.remove_a("app.tollgate.test");
    eventually("app goes down", || !app().is_up()).await;
    assert_eq!(bodies().await, ["fixed"]);
}

/// The servers of backend `b` now: name, weight, backup, admin state.
fn servers(p: &Proxy) -> Vec<(String, u32, bool, AdminState)> {
    let snap = p.snapshot();
    let mut v: Vec<_> = snap
        .backend("b")
        .unwrap()
        .servers
        .iter()
        .map(|s| (s.cfg.name.clone(), s.weight(), s.cfg.backup, s.admin()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn names(p: &Proxy) -> Vec<String> {
    servers(p).into_iter().map(|s| s.0).collect()
}

/// The distinct bodies of `n` requests through `web`, sorted.
async fn bodies(web: SocketAddr, n: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let (status, _, body) = get(web, "/").await;
        assert_eq!(status, 200);
        seen.push(String::from_utf8_lossy(&body).into_owned());
    }
    seen.sort();
    seen.dedup();
    seen
}

async fn origin(tag: &'static str) -> (u16, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    (l.local_addr().unwrap().port(), tagged(l, tag))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_records_bring_servers_that_come_and_go_and_outlast_an_outage() {
    let d = dns().await;
    let ((pa, _a), (pb, _b), (pc, _c), (pf, _f)) =
        (origin("a").await, origin("b").await, origin("c").await, origin("fixed").await);
    for t in ["a", "b", "c"] {
        d.set_a(&format!("{t}.app.test"), &[Ipv4Addr::LOCALHOST]);
    }
    const SRV: &str = "_http._tcp.app.test";
    d.set_srv(SRV, &[(10, 30, pa, "a.app.test"), (10, 10, pb, "b.app.test")]);
    let toml = format!(
        "[global]\nworkers = 1\ndns = {{ nameservers = [\"{}\"], timeout = \"300ms\" }}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\ndiscover = {{ dns_srv = \"{SRV}\", every = \"1s\" }}\n\
         \x20 [[backend.server]]\n  name = \"fixed\"\n  addr = \"127.0.0.1:{pf}\"\n  backup = true\n",
        d.addr
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let (a, b, c) = (format!("a.app.test:{pa}"), format!("b.app.test:{pb}"), format!("c.app.test:{pc}"));

    // Found before the config serves; weights 30:10 scaled to 256:86.
    assert_eq!(
        servers(&p),
        [
            (a.clone(), 256, false, AdminState::Ready),
            (b.clone(), 86, false, AdminState::Ready),
            ("fixed".into(), 1, true, AdminState::Ready),
        ]
    );
    assert_eq!(bodies(web, 16).await, ["a", "b"]);

    // An operator drains `a`; `c` joins the answer: it gets traffic within
    // `every`, and `a` stays DRAIN (its state follows its name).
    p.control().set_server("b", &a, ServerChange { state: Some(AdminState::Drain), weight: None }).unwrap();
    d.set_srv(SRV, &[(10, 30, pa, "a.app.test"), (10, 10, pb, "b.app.test"), (10, 10, pc, "c.app.test")]);
    eventually("c is found", || names(&p).contains(&c)).await;
    assert_eq!(servers(&p)[0], (a.clone(), 256, false, AdminState::Drain));
    assert_eq!(bodies(web, 8).await, ["b", "c"]);

    // `b` leaves the answer: removed.
    d.set_srv(SRV, &[(10, 30, pa, "a.app.test"), (10, 10, pc, "c.app.test")]);
    eventually("b is gone", || !names(&p).contains(&b)).await;
    assert_eq!(bodies(web, 4).await, ["c"]);

    // The name server stops answering: after whole rounds (3 questions
    // mean at least one round ended), and across a reload, the servers
    // found stay, `a` still DRAIN.
    d.silent(true);
    d.asked(3).await;
    assert_eq!(names(&p), [a.clone(), c.clone(), "fixed".into()]);
    assert_eq!(bodies(web, 4).await, ["c"]);
    let cfg = tollgate_config::parse(&toml, std::path::Path::new("test.toml")).unwrap();
    tokio::task::block_in_place(|| p.reload(cfg)).unwrap();
    assert_eq!(names(&p), [a.clone(), c.clone(), "fixed".into()]);
    assert_eq!(servers(&p)[0].3, AdminState::Drain);
    assert_eq!(bodies(web, 4).await, ["c"]);

    // Back, with the service gone from DNS (NXDOMAIN): the servers found
    // are removed, the listed backup serves.
    d.remove_srv(SRV);
    d.silent(false);
    eventually("the found servers go", || names(&p) == ["fixed"]).await;
    assert_eq!(bodies(web, 4).await, ["fixed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_addresses_are_servers_and_priority_makes_backups() {
    let d = dns().await;
    let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = first.local_addr().unwrap().port();
    let Ok(second) = TcpListener::bind(("127.0.0.2", port)).await else {
        panic!("127.0.0.2:{port} is taken: the loopback network must be free for this test");
    };
    let (_o1, _o2) = (tagged(first, "one"), tagged(second, "two"));
    d.set_a("app.test", &[Ipv4Addr::new(127, 0, 0, 1)]);
    let toml = format!(
        "[global]\nworkers = 1\ndns = {{ nameservers = [\"{}\"], timeout = \"300ms\" }}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\ndiscover = {{ dns = \"app.test:{port}\", every = \"1s\", server = {{ weight = 5, maxconn = 10 }} }}\n",
        d.addr
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let (one, two) = (format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}"));
    assert_eq!(servers(&p), [(one.clone(), 5, false, AdminState::Ready)]);
    assert_eq!(p.snapshot().backend("b").unwrap().server(&one).unwrap().cfg.maxconn, Some(10));
    assert_eq!(bodies(web, 4).await, ["one"]);
    d.set_a("app.test", &[Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2)]);
    eventually("the second address is found", || names(&p).contains(&two)).await;
    assert_eq!(bodies(web, 4).await, ["one", "two"]);
    d.set_a("app.test", &[Ipv4Addr::new(127, 0, 0, 2)]);
    eventually("the first goes", || names(&p) == [two.clone()]).await;
    assert_eq!(bodies(web, 4).await, ["two"]);

    // SRV priorities: the lowest are the primaries, the others backups.
    const SRV: &str = "_http._tcp.prio.test";
    d.set_a("one.test", &[Ipv4Addr::new(127, 0, 0, 1)]);
    d.set_a("two.test", &[Ipv4Addr::new(127, 0, 0, 2)]);
    d.set_srv(SRV, &[(1, 5, port, "one.test"), (2, 5, port, "two.test")]);
    let toml = toml.replace(&format!("dns = \"app.test:{port}\""), &format!("dns_srv = \"{SRV}\""));
    let cfg = tollgate_config::parse(&toml, std::path::Path::new("test.toml")).unwrap();
    tokio::task::block_in_place(|| p.reload(cfg)).unwrap();
    assert_eq!(
        servers(&p),
        [
            (format!("one.test:{port}"), 5, false, AdminState::Ready),
            (format!("two.test:{port}"), 5, true, AdminState::Ready)
        ]
    );
    assert_eq!(bodies(web, 4).await, ["one"]);
}

/// A cache tier whose members are found in DNS (`peers = { dns }`): each
/// URL fetched through both members reaches the origin once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_tier_finds_its_members_in_dns() {
    let d = dns().await;
    let (origin, hits) = crate::tier::counting_origin().await;
    let port = crate::tier::port_on_three().await;
    d.set_a("tier.test", &[Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)]);
    let member = |i: u8| {
        proxy(&format!(
            "[global]\nworkers = 1\ndns = {{ nameservers = [\"{}\"], timeout = \"300ms\" }}\n\
             [[cache]]\nname = \"main\"\npeers = {{ dns = \"tier.test:{port}\", every = \"1s\", check = \"500ms\" }}\n\
             [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.{i}:{port}\"]\ndefault_backend = \"app\"\n\
             [[backend]]\nname = \"app\"\ncache = {{ zone = \"main\" }}\n\
             \x20 [[backend.server]]\n  name = \"origin\"\n  addr = \"{}\"\n",
            d.addr, origin.addr
        ))
    };
    let (a, b) = (member(2), member(3));
    for p in [&a, &b] {
        let names: Vec<String> =
            p.snapshot().backend("peers:main").unwrap().servers.iter().map(|s| s.cfg.name.clone()).collect();
        assert_eq!(names, [format!("127.0.0.2:{port}"), format!("127.0.0.3:{port}")]);
    }
    eventually("each member sees the other up", || {
        [&a, &b].iter().all(|p| p.snapshot().backend("peers:main").unwrap().servers.iter().all(|s| s.is_up()))
    })
    .await;
    let via = [a.addr("web").unwrap(), b.addr("web").unwrap()];
    for round in 0..2 {
        let mut clients = [Client::connect(via[0]).await, Client::connect(via[1]).await];
        for k in 0..100 {
            let (status, _, _) = clients[(k + round) % 2].get(&format!("/t/{k}")).await;
            assert_eq!(status, 200);
        }
    }
    let h = hits.lock().unwrap();
    assert_eq!(h.len(), 100);
    assert!(h.values().all(|n| *n == 1), "each URL once at the origin");
}
