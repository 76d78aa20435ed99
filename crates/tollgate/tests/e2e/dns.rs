//! Server names followed at run time, against a DNS server the test runs: a
//! name that does not resolve leaves its server DOWN (the config loads and the
//! others serve), brings it up when it resolves, moves it when its address
//! changes and takes it down when it is gone, all without a reload.

use crate::harness::*;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

/// A DNS server on UDP: `A` queries get the address set (NXDOMAIN while none
/// is), other types an empty answer.
struct Dns {
    addr: SocketAddr,
    answer: Arc<Mutex<Option<Ipv4Addr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn dns() -> Dns {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let answer = Arc::new(Mutex::new(None));
    let a = answer.clone();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else { continue };
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            let mut r = Message::new();
            r.set_id(q.id())
                .set_message_type(MessageType::Response)
                .set_op_code(q.op_code())
                .set_recursion_desired(q.recursion_desired())
                .set_recursion_available(true)
                .set_authoritative(true);
            r.add_queries(q.queries().to_vec());
            let ip = *a.lock().unwrap();
            match (ip, q.queries().first()) {
                (None, _) => {
                    r.set_response_code(ResponseCode::NXDomain);
                }
                (Some(ip), Some(query)) if query.query_type() == RecordType::A => {
                    r.add_answer(Record::from_rdata(query.name().clone(), 1, RData::A(A(ip))));
                }
                _ => {}
            }
            if let Ok(bytes) = r.to_vec() {
                let _ = sock.send_to(&bytes, peer).await;
            }
        }
    });
    Dns { addr, answer, task }
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
    let bodies = async || {
        let mut seen = Vec::new();
        for _ in 0..4 {
            let (status, _, body) = get(web, "/").await;
            assert_eq!(status, 200);
            seen.push(String::from_utf8_lossy(&body).into_owned());
        }
        seen.sort();
        seen.dedup();
        seen
    };

    // Loaded and serving, `app` DOWN with the reason.
    assert!(!app().is_up());
    let last = app().check_status().last.map(|r| r.text).unwrap_or_default();
    assert!(last.contains("DNS: no such name (NXDOMAIN)"), "{last}");
    assert_eq!(bodies().await, ["fixed"]);

    // It resolves: UP at that address, without a reload.
    *d.answer.lock().unwrap() = Some(Ipv4Addr::new(127, 0, 0, 1));
    eventually("app comes up", || app().is_up()).await;
    assert_eq!(app().addr(), SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(bodies().await, ["fixed", "one"]);

    // Its address changes: the new one takes its requests.
    *d.answer.lock().unwrap() = Some(Ipv4Addr::new(127, 0, 0, 2));
    eventually("app moves", || app().addr().ip() == Ipv4Addr::new(127, 0, 0, 2)).await;
    assert!(app().is_up());
    assert_eq!(bodies().await, ["fixed", "two"]);

    // Gone: DOWN again, the others serve.
    *d.answer.lock().unwrap() = None;
    eventually("app goes down", || !app().is_up()).await;
    assert_eq!(bodies().await, ["fixed"]);
}
