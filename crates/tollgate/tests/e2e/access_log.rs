//! Custom access log lines (`access_log_format` with `{name}` fields): every
//! field filled in from the request, the cache and the exchange, over
//! HTTP/1.1 and HTTP/2, with the values from the wire escaped.

use crate::cache::{origin, resp};
use crate::h2::H2Client;
use crate::harness::*;
use http::{Request, StatusCode};
use http_body_util::Full;
use std::time::Duration;

/// Waits (bounded) until the log file holds `n` lines, and returns them.
async fn lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || std::time::Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_format_names_request_cache_server_and_timings() {
    let (o, _) = origin(|_, _| resp(200, &[("cache-control", "max-age=60")], "hello")).await;
    let dir = std::env::temp_dir().join(format!("tollgate-e2e-alog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let _ = std::fs::remove_file(&log);
    let format = "{client_ip} {mode} {method} {uri} {version} {status} {bytes} host={host} ua=\\\"{user_agent}\\\" \
                  ref={referer} rid={request_id} cache={cache} {frontend}/{backend}/{server} retries={retries} \
                  tq={tq} tw={tw} tc={tc} tr={tr} tt={tt} in={bytes_in} {{braces}}";
    let toml = format!(
        "[global]\nworkers = 1\naccess_log = \"{}\"\naccess_log_format = \"{format}\"\n\
         [[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", h2c = true }}]\ndefault_backend = \"b\"\n\
         request_id = true\n\
         [[backend]]\nname = \"b\"\ncache = {{ zone = \"main\" }}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n\
         [[cache]]\nname = \"main\"\nmemory = \"8MiB\"\n",
        log.display(),
        o.addr
    );
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();
    let get = |ua: &'static str| {
        Request::get("/page?x=1")
            .header("host", "shop.test")
            .header("user-agent", ua)
            .header("referer", "https://ref.test/a")
            .body(Full::default())
            .unwrap()
    };
    // A miss that is stored, then a hit; the second agent's quote is escaped.
    assert_eq!(Client::connect(addr).await.send(get("curl/8.5")).await.0, StatusCode::OK);
    assert_eq!(Client::connect(addr).await.send(get("evil\" agent")).await.0, StatusCode::OK);
    let mut h2 = H2Client::plain(addr).await;
    let r = Request::get("http://h2.test/other").header("user-agent", "h2-client").body(()).unwrap();
    assert_eq!(h2.send(r, None).await.0, StatusCode::OK);

    let got = lines(&log, 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let miss = &got[0];
    assert!(miss.starts_with("127.0.0.1 http GET /page?x=1 HTTP/1.1 200 5 host=shop.test ua=\"curl/8.5\" "), "{miss}");
    assert!(miss.contains(" ref=https://ref.test/a rid="), "{miss}");
    let rid = miss.split(" rid=").nth(1).unwrap().split(' ').next().unwrap();
    assert_eq!(rid.len(), 32, "a made request id: {miss}");
    assert!(miss.contains(" cache=fwd=uri-miss;stored web/b/s1 retries=0 tq="), "{miss}");
    assert!(miss.contains(" in=- {braces}"), "{miss}");
    for t in ["tq=", "tr=", "tt="] {
        let v = miss.split(t).nth(1).unwrap().split(' ').next().unwrap();
        assert!(v.parse::<f64>().is_ok(), "{t}{v} in {miss}");
    }
    let hit = &got[1];
    assert!(hit.contains(" ua=\"evil\\\" agent\" "), "escaped: {hit}");
    assert!(hit.contains(" cache=hit;ttl="), "{hit}");
    assert!(hit.contains(" tc=- tr=- "), "no server was asked: {hit}");
    let h2line = &got[2];
    assert!(
        h2line.starts_with("127.0.0.1 http GET /other HTTP/2.0 200 5 host=h2.test ua=\"h2-client\" ref=- "),
        "{h2line}"
    );
    assert!(h2line.contains(" cache=fwd=uri-miss;"), "{h2line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The format is checked at load: an unknown field is refused with its key.
#[test]
fn an_unknown_field_is_refused_at_its_key() {
    let src = "[global]\naccess_log_format = \"{client_ip} {agent}\"\n";
    let text = tollgate_config::parse(src, std::path::Path::new("t.toml")).unwrap_err().to_string();
    assert!(text.contains("t.toml:2:") && text.contains("global.access_log_format"), "{text}");
    assert!(text.contains("`{agent}` is not a log field"), "{text}");
}
