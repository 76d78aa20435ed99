//! Reading a PROXY protocol header off an accepted connection (the codec,
//! pure, is `tollgate_wire::proxy_proto`).

use tollgate_wire::proxy_proto::{Decoded, Header, V2_SIGNATURE, decode};

/// Reads a PROXY header off the start of `stream`, and not one byte more (what
/// follows may be a TLS handshake, which must reach the TLS acceptor whole).
/// Version 2 headers are read in two exact reads; version 1 lines, at most 107
/// bytes, byte by byte after their first 15 (the shortest line,
/// `PROXY UNKNOWN\r\n`). The caller bounds the time it may take.
pub async fn read_header(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Result<Header, &'static str> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 15];
    stream.read_exact(&mut buf).await.map_err(|_| "proxy-header-incomplete")?;
    loop {
        match decode(&buf)? {
            Decoded::Complete(h) => return Ok(h),
            Decoded::Partial => {}
        }
        let more = if buf[..12] == V2_SIGNATURE {
            if buf.len() < 16 {
                16 - buf.len()
            } else {
                16 + u16::from_be_bytes([buf[14], buf[15]]) as usize - buf.len()
            }
        } else {
            1
        };
        let at = buf.len();
        buf.resize(at + more, 0);
        stream.read_exact(&mut buf[at..]).await.map_err(|_| "proxy-header-incomplete")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tollgate_wire::proxy_proto::{Version, encode, encode_local};

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn read_header_takes_the_header_and_nothing_more() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut headers = Vec::new();
        for v in [Version::V1, Version::V2] {
            let mut h = Vec::new();
            encode(v, sa("1.2.3.4:5"), sa("6.7.8.9:10"), &mut h);
            headers.push(h);
        }
        let mut local = Vec::new();
        encode_local(Version::V1, &mut local);
        headers.push(local);
        for h in headers {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            // Sent in two pieces, with the payload right behind it.
            let (a, b) = h.split_at(7);
            c.write_all(a).await.unwrap();
            let sender = tokio::spawn({
                let rest = [b, b"\x16payload"].concat();
                async move {
                    c.write_all(&rest).await.unwrap();
                    c
                }
            });
            let got = read_header(&mut s).await.unwrap();
            assert_eq!(got.len, h.len());
            let _c = sender.await.unwrap();
            let mut next = [0u8; 8];
            s.read_exact(&mut next).await.unwrap();
            assert_eq!(&next, b"\x16payload");
        }
    }
}
