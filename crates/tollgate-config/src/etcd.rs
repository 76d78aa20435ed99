//! `[global.etcd]`: etcd (v3) as a store shared by every instance of a fleet.
//! Server states and weights set on one instance are written under
//! `<prefix>servers/` and applied by every instance watching it; with
//! `config = true` the config itself is read from `<prefix>config`. The
//! keys and their values are defined here; the runtime (runtime/etcd.rs)
//! reads, watches and writes them.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Etcd {
    /// `http://host:port` of each member.
    pub endpoints: Vec<String>,
    /// Every key's beginning; ends with `/`.
    pub prefix: String,
    /// This instance's name, in its status key.
    pub name: String,
    /// The config is read from `<prefix>config` when it is there.
    pub config: bool,
    /// Bound on one request (connect, read, write).
    pub timeout: Duration,
}

/// Default `prefix`.
pub const ETCD_PREFIX: &str = "/tollgate/";
/// Default `timeout`.
pub const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

impl Etcd {
    /// The keys of server states: `<prefix>servers/<backend>/<server>`.
    pub fn servers_prefix(&self) -> String {
        format!("{}servers/", self.prefix)
    }

    pub fn server_key(&self, backend: &str, server: &str) -> String {
        format!("{}servers/{backend}/{server}", self.prefix)
    }

    /// The backend and server a server-state key names.
    pub fn server_of<'a>(&self, key: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix("servers/")?;
        let (b, s) = rest.split_once('/')?;
        (!b.is_empty() && !s.is_empty()).then_some((b, s))
    }

    pub fn config_key(&self) -> String {
        format!("{}config", self.prefix)
    }

    /// Where this instance says how the config from etcd went.
    pub fn status_key(&self) -> String {
        format!("{}status/{}", self.prefix, self.name)
    }
}

/// The default instance name: the host's name (HAProxy's default local peer
/// name), so that a restart writes the same status key again.
pub fn default_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| crate::valid_name(h))
        .unwrap_or_else(|| "tollgate".into())
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigErrors};
    use std::path::Path;
    use std::time::Duration;

    fn parse(etcd: &str) -> Result<Config, ConfigErrors> {
        crate::parse(
            &format!(
                "[global]\netcd = {{ {etcd} }}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\n\
                 default_backend = \"b\"\n[[backend]]\nname = \"b\"\n"
            ),
            Path::new("etcd.toml"),
        )
    }

    #[test]
    fn keys_defaults_and_mistakes() {
        let c = parse("endpoints = [\"http://127.0.0.1:2379/\"]").unwrap();
        let e = c.global.etcd.as_deref().unwrap();
        assert_eq!(
            (e.endpoints.clone(), e.prefix.as_str(), e.config),
            (vec!["http://127.0.0.1:2379".to_string()], "/tollgate/", false)
        );
        assert_eq!(e.timeout, Duration::from_secs(2));
        assert_eq!(e.name, super::default_name());
        assert!(!e.name.is_empty() && crate::valid_name(&e.name), "{}", e.name);
        let c = parse("endpoints = [\"http://a.internal:2379\", \"http://[::1]:2379\"], prefix = \"/fleet/eu/\", name = \"edge-1\", config = true, timeout = \"500ms\"").unwrap();
        let e = c.global.etcd.as_deref().unwrap();
        assert_eq!(
            (e.endpoints.len(), e.name.as_str(), e.config, e.timeout),
            (2, "edge-1", true, Duration::from_millis(500))
        );
        assert_eq!(e.server_key("app", "10.0.0.1:80"), "/fleet/eu/servers/app/10.0.0.1:80");
        assert_eq!(e.server_of("/fleet/eu/servers/app/10.0.0.1:80"), Some(("app", "10.0.0.1:80")));
        for k in ["/fleet/eu/servers/app", "/fleet/eu/servers//s", "/other/servers/a/b", "/fleet/eu/config"] {
            assert_eq!(e.server_of(k), None, "{k}");
        }
        assert_eq!(
            (e.config_key(), e.status_key()),
            ("/fleet/eu/config".to_string(), "/fleet/eu/status/edge-1".to_string())
        );

        for (etcd, key, what) in [
            ("endpoints = []", "global.etcd.endpoints", "at least one"),
            ("endpoints = [\"127.0.0.1:2379\"]", "global.etcd.endpoints[0]", "not http://host:port"),
            ("endpoints = [\"http://127.0.0.1\"]", "global.etcd.endpoints[0]", "not http://host:port"),
            ("endpoints = [\"https://127.0.0.1:2379\"]", "global.etcd.endpoints[0]", "TLS to etcd is not supported"),
            ("endpoints = [\"http://e:1\"], prefix = \"tollgate\"", "global.etcd.prefix", "begin and end"),
            ("endpoints = [\"http://e:1\"], name = \"a b\"", "global.etcd.name", "not a valid name"),
            ("endpoints = [\"http://e:1\"], timeout = \"soon\"", "global.etcd.timeout", ""),
            ("endpoints = [\"http://e:1\"], colour = 1", "colour", "unknown field"),
        ] {
            let e = parse(etcd).unwrap_err().to_string();
            assert!(
                e.contains(key) && e.contains(what) && e.contains("etcd.toml:"),
                "{etcd}: `{key}` / `{what}` in {e}"
            );
        }
    }
}
