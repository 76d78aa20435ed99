//! `forward` on a backend: a forward proxy's lists, their defaults, and the
//! keys it cannot go with.

use super::*;
use crate::forward::HostPattern;
use std::path::Path;

fn parse(toml: &str) -> Result<Config, ConfigErrors> {
    crate::parse(toml, Path::new("fwd.toml"))
}

fn config(forward: &str, backend_extra: &str) -> String {
    format!(
        "[[userlist]]\nname = \"staff\"\nusers = [{{ name = \"ann\", insecure_password = \"x\" }}]\n\
         [[frontend]]\nname = \"px\"\nbind = [\"127.0.0.1:3128\"]\ndefault_backend = \"egress\"\n\
         [[backend]]\nname = \"egress\"\nforward = {{ {forward} }}\n{backend_extra}"
    )
}

#[test]
fn defaults_and_every_key() {
    let c = parse(&config("", "")).unwrap();
    let f = c.backends[0].forward.as_deref().unwrap();
    assert_eq!((f.allow_hosts.clone(), f.ports.clone(), f.connect_ports.clone()), (None, vec![80, 443], vec![443]));
    assert_eq!((f.allow_networks.clone(), f.deny_networks.clone(), f.auth.is_none()), (None, vec![], true));
    assert!(!f.addr_allowed("127.0.0.1".parse().unwrap()), "private ranges are refused by default");
    assert!(!c.backends[0].redispatch, "retries stay on the address asked for");

    let all = "allow_hosts = [\"*.example.com\", \"api.test\"], ports = [80, 8080], connect_ports = [443, 8443], \
               allow_networks = [\"127.0.0.0/8\", \"::1\"], deny_networks = [\"127.0.0.9\"], \
               auth = { userlist = \"staff\", realm = \"corp\" }";
    let c = parse(&config(all, "")).unwrap();
    let f = c.backends[0].forward.as_deref().unwrap();
    assert_eq!(
        f.allow_hosts,
        Some(vec![HostPattern::Under(".example.com".into()), HostPattern::Exact("api.test".into())])
    );
    assert_eq!((f.ports.clone(), f.connect_ports.clone()), (vec![80, 8080], vec![443, 8443]));
    assert_eq!(f.allow_networks.as_ref().map(Vec::len), Some(2));
    assert!(f.addr_allowed("127.0.0.1".parse().unwrap()) && f.addr_allowed("::1".parse().unwrap()));
    assert!(!f.addr_allowed("127.0.0.9".parse().unwrap()));
    let auth = f.auth.as_ref().unwrap();
    assert_eq!((auth.userlist, auth.realm.as_str()), (0, "corp"));
}

#[test]
fn mistakes_are_named_with_their_keys() {
    const WRONG: &str = "allow_hosts = [\"a b\"], ports = [0, 70000], connect_ports = [-1], \
                         allow_networks = [\"10.0.0.0/33\"], deny_networks = [\"nope\"], \
                         auth = { userlist = \"nobody\", strip = true }";
    let e = parse(&config(&format!("{WRONG}, colour = 1"), "")).unwrap_err().to_string();
    assert!(e.contains("colour"), "unknown key: {e}");
    let e = parse(&config(WRONG, "")).unwrap_err().to_string();
    for key in [
        "backend[0].forward.allow_hosts[0]",
        "backend[0].forward.ports[0]",
        "backend[0].forward.ports[1]",
        "backend[0].forward.connect_ports[0]",
        "backend[0].forward.allow_networks[0]",
        "backend[0].forward.deny_networks[0]",
        "backend[0].forward.auth.userlist",
        "backend[0].forward.auth.strip",
    ] {
        assert!(e.contains(key), "{key} in {e}");
    }
    assert!(e.contains("fwd.toml:"), "file and line: {e}");
}

#[test]
fn servers_and_what_chooses_them_do_not_go_with_forward() {
    let extra = "balance = \"leastconn\"\ncookie = { name = \"srv\" }\nstick = { on = \"source\" }\n\
                 check = { interval = \"2s\" }\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"127.0.0.1:1\"\n";
    let e = parse(&config("", extra)).unwrap_err().to_string();
    for key in ["backend[0].balance", "backend[0].cookie", "backend[0].stick", "backend[0].check", "backend[0].forward"]
    {
        assert!(e.contains(key), "{key} in {e}");
    }
    assert!(e.contains("leave `server` out"), "{e}");
    let e = parse(&config("", "mode = \"tcp\"")).unwrap_err().to_string();
    assert!(e.contains("`forward` is for HTTP"), "{e}");
}
