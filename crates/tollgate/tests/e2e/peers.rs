//! Tables shared by three instances (`[global.peers]`, `share = true`): a
//! rate limit of 5 requests per client counts the requests made through all
//! three, and a client stuck to a server on one instance is sent to it by
//! the others; a connection from an address that is no peer is closed.

use crate::acme::free_port;
use crate::harness::*;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::lb::track::{Key, now_ms};
use tollgate_proxy::runtime::control::ServerChange;

async fn text(t: &'static str) -> Origin {
    serve(
        move |_| async move { http::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(t.as_bytes()))) },
    )
    .await
}

fn member(me: u16, ports: &[u16], one: SocketAddr, two: SocketAddr) -> Proxy {
    let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    proxy(&format!(
        "[global]\nworkers = 1\npeers = {{ list = [{}], self = \"127.0.0.1:{me}\" }}\n\
         [[table]]\nname = \"per_ip\"\nkey = \"src\"\nperiod = \"60s\"\nexpire = \"120s\"\nshare = true\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"plain\"\ntrack = [\"per_ip\"]\n\
         \x20 [[frontend.rule]]\n  when = {{ counter = {{ table = \"per_ip\", name = \"http_req_rate\", above = 5 }} }}\n  deny = 429\n\
         [[frontend]]\nname = \"sticky\"\nbind = [\"127.0.0.3:0\"]\ndefault_backend = \"app\"\n\
         [[backend]]\nname = \"plain\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{one}\"\n\
         [[backend]]\nname = \"app\"\nstick = {{ on = \"source\", share = true }}\n\
         \x20 [[backend.server]]\n  name = \"s1\"\n  addr = \"{one}\"\n\
         \x20 [[backend.server]]\n  name = \"s2\"\n  addr = \"{two}\"\n",
        list.join(", ")
    ))
}

/// The requests counted for 127.0.0.1 in `p`'s table.
fn counted(p: &Proxy) -> u64 {
    let snap = p.snapshot();
    let entries = snap.tables[0].entries(now_ms(), 10);
    entries.iter().find(|(k, _, _)| *k == Key::Ip(IpAddr::from([127, 0, 0, 1]))).map_or(0, |(_, c, _)| c.http_req_cnt)
}

async fn within(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(5), "{what}: not within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn status(addr: SocketAddr) -> u16 {
    get(addr, "/").await.0.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_and_a_stick_table_hold_across_three_instances() {
    let (one, two) = (text("one").await, text("two").await);
    let ports = [free_port(), free_port(), free_port()];
    let mut peers: Vec<Proxy> = ports.iter().map(|p| member(*p, &ports, one.addr, two.addr)).collect();
    let web: Vec<SocketAddr> = peers.iter().map(|p| p.addr("web").unwrap()).collect();

    // Five requests from one client, spread over the three: each instance
    // counts all five (its own and the others' pushed), none is refused.
    for (i, n) in [2, 2, 1].iter().enumerate() {
        for _ in 0..*n {
            assert_eq!(status(web[i]).await, 200);
        }
    }
    for (i, p) in peers.iter().enumerate() {
        within(&format!("instance {i} counts the five"), || counted(p) == 5).await;
    }
    // The sixth is over the limit wherever it goes.
    assert_eq!(status(web[2]).await, 429);
    assert_eq!(status(web[0]).await, 429);

    // Stickiness: on instance 0, s1 drains, so the client is sent to s2 and
    // stuck there; instances 1 and 2 (s1 ready, which their balancer would
    // pick first) send it to s2 too.
    peers[0].control().set_server("app", "s1", ServerChange { state: Some(AdminState::Drain), weight: None }).unwrap();
    let body = |a: SocketAddr| async move { String::from_utf8_lossy(&get(a, "/").await.2).into_owned() };
    assert_eq!(body(peers[0].addr("sticky").unwrap()).await, "two");
    for (i, p) in peers.iter().enumerate().skip(1) {
        within(&format!("instance {i} has the stick entry"), || {
            p.snapshot().backend("app").unwrap().stick.as_ref().unwrap().len() == 1
        })
        .await;
        assert_eq!(body(p.addr("sticky").unwrap()).await, "two", "instance {i}");
    }

    // A peer goes: the others push to each other on (the pushes to it fail
    // and are dropped).
    drop(peers.pop());
    let before = counted(&peers[1]);
    assert_eq!(status(web[0]).await, 429);
    within("instance 1 still counts what instance 0 sees", || counted(&peers[1]) == before + 1).await;

    // What is not a peer cannot push: a connection from an address outside
    // the list (a client here comes from 127.0.0.2) is closed at once.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let stream = sock.connect(SocketAddr::from(([127, 0, 0, 1], ports[1]))).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let forged = r#"{"from":"127.0.0.2:1","tables":[{"table":"per_ip","entries":[[{"ip":"10.9.9.9"},{"reqs":100}]]}]}"#;
    let req = http::Request::post("/tollgate/peers")
        .header("host", "peer")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(forged.as_bytes())))
        .unwrap();
    assert!(sender.send_request(req).await.is_err(), "the connection is closed at once");
    let snap = peers[1].snapshot();
    assert!(snap.tables[0].entries(now_ms(), 10).iter().all(|(k, _, _)| *k != Key::Ip(IpAddr::from([10, 9, 9, 9]))));
}
