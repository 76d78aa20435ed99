//! Slow clients at the connection limit (issue 30, 2): when every slot of
//! `max_connections` is held and a client waits, a connection that only
//! waits on its client gives way: an idle keep-alive one first, then the
//! oldest slow request head (a slowloris), answered 408. Connections with a
//! request in progress are not touched.

use crate::harness::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

/// A connection that sends the start of a head and no more.
async fn slowloris(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ").await.unwrap();
    s
}

/// What the proxy sends on `s` until it closes it (within `WAIT`).
async fn until_closed(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    // A reset ends it as a close does.
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await.expect("closed in time");
    String::from_utf8_lossy(&out).into_owned()
}

/// Nothing from the proxy on `s` for a moment: still open and waiting.
async fn still_open(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(200), s.read(&mut b)).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_an_idle_then_a_slow_connection_gives_way() {
    let origin = echo().await;
    // One worker, one listener: the accept loop holds one slot for the next
    // connection, so 3 connections fill `max_connections = 3` and the 4th waits.
    let toml = format!(
        "[global]\nworkers = 1\nmax_connections = 3\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
         timeout = {{ http_request = \"60s\", keep_alive = \"60s\" }}\n\
         [[backend]]\nname = \"app\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n",
        origin.addr
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();

    // An idle keep-alive connection, and two slow heads: every slot held.
    let mut idle = TcpStream::connect(web).await.unwrap();
    idle.write_all(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut first = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, idle.read(&mut first)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let mut slow1 = slowloris(web).await;
    let mut slow2 = slowloris(web).await;

    // A new client is served at once: the idle connection gave way (not a
    // timeout: those are 60 s).
    let t0 = Instant::now();
    let reply = raw(web, b"GET /new HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", WAIT).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(until_closed(&mut idle).await, "", "closed quietly");
    assert!(still_open(&mut slow1).await && still_open(&mut slow2).await);

    // Fill the slot again with a third slow head; once the heads have waited
    // past the grace a head gets (1 s, io/reclaim.rs HEAD_GRACE: a time the
    // test has to let pass), the next client takes the oldest one's slot.
    let mut slow3 = slowloris(web).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reply = raw(web, b"GET /next HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", WAIT).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    let told = until_closed(&mut slow1).await;
    assert!(told.starts_with("HTTP/1.1 408 "), "{told}");
    assert!(still_open(&mut slow2).await && still_open(&mut slow3).await);
}
