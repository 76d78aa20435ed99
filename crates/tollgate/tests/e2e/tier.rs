//! A cache tier across three instances (`peers` on a zone), on 127.0.0.2,
//! .3 and .4: 1,000 distinct URLs fetched through all three reach the origin
//! once each, and are stored once in the fleet; a member that goes has its
//! keys fetched once more by the next owner, and the others keep theirs.

use crate::harness::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The origin: each path answered with itself, cacheable for 10 minutes;
/// the requests for each path counted.
pub(crate) async fn counting_origin() -> (Origin, Arc<Mutex<HashMap<String, u32>>>) {
    let hits: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let h = hits.clone();
    let o = serve(move |req| {
        let h = h.clone();
        async move {
            let path = req.uri().path().to_string();
            // The tier's mark stays between members.
            let key = if req.headers().contains_key("tollgate-peer") { format!("leaked {path}") } else { path.clone() };
            *h.lock().unwrap().entry(key).or_default() += 1;
            http::Response::builder()
                .header("cache-control", "max-age=600")
                .body(http_body_util::Full::new(bytes::Bytes::from(path)))
                .unwrap()
        }
    })
    .await;
    (o, hits)
}

/// A port free on 127.0.0.2, .3 and .4 (the members' binds must be known
/// before they start: each names the others).
pub(crate) async fn port_on_three() -> u16 {
    for _ in 0..20 {
        let l = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let others = (TcpListener::bind(("127.0.0.3", port)).await, TcpListener::bind(("127.0.0.4", port)).await);
        if let (Ok(_), Ok(_)) = others {
            return port;
        }
    }
    panic!("no port free on 127.0.0.2-4: the loopback network must be free for this test");
}

fn member(i: u8, port: u16, origin: SocketAddr) -> Proxy {
    let list: Vec<String> = (2..=4).map(|j| format!("\"127.0.0.{j}:{port}\"")).collect();
    proxy(&format!(
        "[[cache]]\nname = \"main\"\nmemory = \"64MiB\"\npeers = {{ list = [{}], check = \"500ms\" }}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.{i}:{port}\"]\ndefault_backend = \"app\"\n\
         [[backend]]\nname = \"app\"\ncache = {{ zone = \"main\" }}\n\
         \x20 [[backend.server]]\n  name = \"origin\"\n  addr = \"{origin}\"\n",
        list.join(", ")
    ))
}

/// One GET of `path` to `to` from the address `from`, with the tier's field
/// set to `mark`; its status.
async fn send_from(from: &str, to: SocketAddr, path: &str, mark: &str) -> u16 {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
    let stream = sock.connect(to).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", "test.local")
        .header("tollgate-peer", mark)
        .body(http_body_util::Full::<bytes::Bytes>::default())
        .unwrap();
    sender.send_request(req).await.unwrap().status().as_u16()
}

fn objects(p: &Proxy) -> u64 {
    p.control().report().unwrap().caches[0].objects
}

/// Whether `p` sees the member at `addr` as down.
fn sees_down(p: &Proxy, addr: &str) -> bool {
    p.snapshot().backend("peers:main").unwrap().server(addr).is_some_and(|s| !s.is_up())
}

async fn fetch_all(via: &[SocketAddr], n: usize, shift: usize) {
    let mut clients = Vec::new();
    for a in via {
        clients.push(Client::connect(*a).await);
    }
    for k in 0..n {
        let c = &mut clients[(k + shift) % via.len()];
        let path = format!("/item/{k}");
        let (status, _, body) = c.get(&path).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(body, path.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_urls_through_three_members_reach_the_origin_once_each() {
    let (origin, hits) = counting_origin().await;
    let port = port_on_three().await;
    let (a, b) = (member(2, port, origin.addr), member(3, port, origin.addr));
    let c = member(4, port, origin.addr);
    let addrs: Vec<SocketAddr> = [&a, &b, &c].iter().map(|p| p.addr("web").unwrap()).collect();
    // Each member's first checks have found the others up.
    let start = Instant::now();
    while [&a, &b, &c].iter().any(|p| p.snapshot().backend("peers:main").unwrap().servers.iter().any(|s| !s.is_up())) {
        assert!(start.elapsed() < Duration::from_secs(10), "the members do not see each other");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Each URL through one member, then through another: the origin sees
    // each once, and the fleet stores each once.
    fetch_all(&addrs, 1000, 0).await;
    fetch_all(&addrs, 1000, 1).await;
    {
        let h = hits.lock().unwrap();
        assert_eq!(h.len(), 1000, "no request reached the origin with the tier's mark");
        assert!(h.values().all(|n| *n == 1), "{:?}", h.iter().filter(|(_, n)| **n > 1).take(5).collect::<Vec<_>>());
    }
    let stored: Vec<u64> = [&a, &b, &c].iter().map(|p| objects(p)).collect();
    assert_eq!(stored.iter().sum::<u64>(), 1000, "each response stored once in the fleet: {stored:?}");
    assert!(stored.iter().all(|n| *n > 250), "each member owns a share: {stored:?}");

    // A request a member passed on (the mark, from a member's address) is
    // served where it arrives, whoever owns its key: one hop at most, never
    // a loop. The same mark from another address means nothing: it is
    // dropped, and the request goes to its owner as any other.
    let total = |ps: &[&Proxy]| ps.iter().map(|p| objects(p)).sum::<u64>();
    for k in 0..6 {
        let mark = format!("127.0.0.3:{port};backend=app;zone=main;proto=http");
        let before = (objects(&a), total(&[&a, &b, &c]));
        let status = send_from("127.0.0.3", addrs[0], &format!("/direct/{k}"), &mark).await;
        assert_eq!((status, objects(&a)), (200, before.0 + 1), "/direct/{k} stored where it arrived");
        let status = send_from("127.0.0.1", addrs[0], &format!("/forged/{k}"), &mark).await;
        assert_eq!((status, total(&[&a, &b, &c])), (200, before.1 + 2), "/forged/{k} stored once, by its owner");
    }
    hits.lock().unwrap().retain(|p, _| !p.starts_with("/direct/") && !p.starts_with("/forged/"));

    // C goes: once A and B see it down, its keys fall to them, fetched once
    // more each; the others stay where they were.
    let c_addr = format!("127.0.0.4:{port}");
    let c_owned = stored[2] as usize;
    let forged_at_c = objects(&c) - stored[2];
    drop(c);
    let start = Instant::now();
    while !(sees_down(&a, &c_addr) && sees_down(&b, &c_addr)) {
        assert!(start.elapsed() < Duration::from_secs(10), "C is not seen down");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fetch_all(&addrs[..2], 1000, 0).await;
    fetch_all(&addrs[..2], 1000, 1).await;
    let h = hits.lock().unwrap();
    let twice = h.values().filter(|n| **n == 2).count();
    assert!(h.values().all(|n| *n <= 2));
    assert_eq!(twice, c_owned, "exactly C's keys were fetched again");
    assert_eq!(
        objects(&a) + objects(&b),
        1000 + 6 + 6 - forged_at_c,
        "the 1,000, the six /direct and the /forged ones not at C"
    );
}
