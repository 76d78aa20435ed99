//! `[[cache]]` zones, and `cache = ...` on backends and rules.

use super::{Builder, is_tchar, parse_net, valid_name};
use crate::model::{CacheDisk, CacheUse, CacheZone};
use crate::raw::{RawCacheDisk, RawCacheUse, RawCacheZone};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Who may send PURGE without `purge_from`: this host only.
const DEFAULT_PURGE_FROM: [&str; 2] = ["127.0.0.0/8", "::1/128"];
/// The smallest memory tier accepted: room for a few small objects.
const MIN_MEMORY: u64 = 64 << 10;
/// The smallest disk tier accepted.
const MIN_DISK: u64 = 1 << 20;

impl Builder<'_> {
    /// The zones, and their indexes by name.
    pub(super) fn cache_zones(&mut self, raw: &[Spanned<RawCacheZone>]) -> (Vec<CacheZone>, HashMap<String, usize>) {
        let mut zones = Vec::new();
        let mut index = HashMap::new();
        // Disk directories taken so far, and by which zone.
        let mut disks: Vec<(PathBuf, String)> = Vec::new();
        for (i, z) in raw.iter().enumerate() {
            let key = format!("cache[{i}]");
            let z = z.get_ref();
            let name = z.name.get_ref().clone();
            if !valid_name(&name) {
                self.err(
                    z.name.span(),
                    format!("{key}.name"),
                    format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
                );
            }
            if index.contains_key(&name) {
                self.err(z.name.span(), format!("{key}.name"), format!("cache zone `{name}` is defined twice"));
            }
            let disk =
                z.disk.as_ref().and_then(|d| self.cache_disk(d.get_ref(), &format!("{key}.disk"), &name, &mut disks));
            let memory = match &z.memory {
                Some(m) => match self.size(m, &format!("{key}.memory")) {
                    Some(n) if n < MIN_MEMORY => {
                        self.err(m.span(), format!("{key}.memory"), "must be at least 64KiB");
                        MIN_MEMORY
                    }
                    Some(n) => n,
                    None => MIN_MEMORY,
                },
                None => CacheZone::DEFAULT_MEMORY,
            };
            // With a disk tier, objects larger than the memory tier holds are
            // kept on disk only.
            let (room, tier) = match &disk {
                Some(d) => (d.size, "disk.size"),
                None => (memory, "memory"),
            };
            let max_object = match &z.max_object {
                Some(m) => match self.size(m, &format!("{key}.max_object")) {
                    Some(0) => {
                        self.err(m.span(), format!("{key}.max_object"), "must be more than 0");
                        1
                    }
                    Some(n) if n > room => {
                        self.err(
                            m.span(),
                            format!("{key}.max_object"),
                            format!("{n} bytes is more than the zone's {tier} ({room} bytes)"),
                        );
                        room
                    }
                    Some(n) => n,
                    None => 1,
                },
                None => CacheZone::DEFAULT_MAX_OBJECT.min(memory),
            };
            let heuristic_percent = z
                .heuristic_percent
                .as_ref()
                .and_then(|p| self.int_in(p, 0, 100, &format!("{key}.heuristic_percent")))
                .unwrap_or(10) as u32;
            let heuristic_max = z
                .heuristic_max
                .as_ref()
                .and_then(|d| self.duration(d, &format!("{key}.heuristic_max"), true))
                .unwrap_or(Duration::from_secs(86_400));
            let targeted_cache_control = match &z.targeted_cache_control {
                None => Some(CacheZone::DEFAULT_TARGETED.to_string()),
                Some(t) if t.get_ref().is_empty() => None,
                Some(t) => {
                    let name = t.get_ref().to_ascii_lowercase();
                    let bad = if name.is_empty() || !name.bytes().all(is_tchar) {
                        Some(format!("`{}` is not a field name", t.get_ref()))
                    } else if matches!(name.as_str(), "cache-control" | "expires" | "pragma") {
                        Some(format!(
                            "`{}` is not a targeted field (RFC 9213): name another, or \"\" for none",
                            t.get_ref()
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = bad {
                        self.err(t.span(), format!("{key}.targeted_cache_control"), why);
                    }
                    Some(name)
                }
            };
            let stale_if_error = z
                .stale_if_error
                .as_ref()
                .and_then(|d| self.duration(d, &format!("{key}.stale_if_error"), true))
                .unwrap_or_default();
            let mut purge_from = Vec::new();
            match &z.purge_from {
                Some(list) => {
                    for n in list.get_ref().to_vec() {
                        match parse_net(&n) {
                            Some(net) => purge_from.push(net),
                            None => self.err(
                                list.span(),
                                format!("{key}.purge_from"),
                                format!("`{n}` is not an address or CIDR block"),
                            ),
                        }
                    }
                }
                None => purge_from.extend(DEFAULT_PURGE_FROM.iter().filter_map(|n| parse_net(n))),
            }
            index.entry(name.clone()).or_insert(i);
            zones.push(CacheZone {
                name,
                memory,
                max_object,
                // Off unless asked (issue 33): a stored session cookie goes to every client.
                store_set_cookie: z.store_set_cookie.as_ref().is_some_and(|b| *b.get_ref()),
                targeted_cache_control,
                strip_targeted_cache_control: z.strip_targeted_cache_control.as_ref().is_none_or(|b| *b.get_ref()),
                stale_if_error,
                heuristic_percent,
                heuristic_max,
                purge_from,
                disk,
                peers: None,
            });
        }
        (zones, index)
    }

    /// A zone's `disk` table: the directory (relative to the config file's),
    /// created if missing and checked writable (not offline), not another
    /// zone's nor inside or around one; the size.
    fn cache_disk(
        &mut self,
        raw: &RawCacheDisk,
        key: &str,
        zone: &str,
        taken: &mut Vec<(PathBuf, String)>,
    ) -> Option<CacheDisk> {
        let size = match self.size(&raw.size, &format!("{key}.size")) {
            Some(n) if n < MIN_DISK => {
                self.err(raw.size.span(), format!("{key}.size"), "must be at least 1MiB");
                None
            }
            n => n,
        };
        let pkey = format!("{key}.path");
        if raw.path.get_ref().is_empty() {
            self.err(raw.path.span(), pkey, "must name a directory");
            return None;
        }
        let mut path = self.base_dir().join(raw.path.get_ref());
        if !self.offline {
            if let Err(e) = writable_dir(&path) {
                self.err(raw.path.span(), pkey, format!("`{}` {e}", path.display()));
                return None;
            }
            path = std::fs::canonicalize(&path).unwrap_or(path);
        }
        if let Some((_, other)) = taken.iter().find(|(p, _)| p.starts_with(&path) || path.starts_with(p)) {
            self.err(
                raw.path.span(),
                pkey,
                format!("`{}` is (or holds, or is inside) the disk of cache zone `{other}`: each zone needs its own directory", path.display()),
            );
            return None;
        }
        taken.push((path.clone(), zone.to_string()));
        Some(CacheDisk { path, size: size? })
    }

    /// A backend's `cache`: a zone, or none (`false` is allowed and means none).
    pub(super) fn backend_cache(
        &mut self,
        raw: Option<&Spanned<RawCacheUse>>,
        key: &str,
        zones: &HashMap<String, usize>,
    ) -> Option<usize> {
        match self.rule_cache(raw, key, zones)? {
            CacheUse::Zone(i) => Some(i),
            CacheUse::Off => None,
        }
    }

    /// A rule's `cache`: a zone, or `false` to bypass the backend's.
    pub(super) fn rule_cache(
        &mut self,
        raw: Option<&Spanned<RawCacheUse>>,
        key: &str,
        zones: &HashMap<String, usize>,
    ) -> Option<CacheUse> {
        let raw = raw?;
        let k = format!("{key}.cache");
        match raw.get_ref() {
            RawCacheUse::Switch(false) => Some(CacheUse::Off),
            RawCacheUse::Zone(r) => match zones.get(&r.zone) {
                Some(i) => Some(CacheUse::Zone(*i)),
                None => {
                    let mut known: Vec<&str> = zones.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    let known = if known.is_empty() {
                        "there is no [[cache]] zone".to_string()
                    } else {
                        format!("zones: {}", known.join(", "))
                    };
                    self.err(raw.span(), format!("{k}.zone"), format!("no cache zone is named `{}` ({known})", r.zone));
                    None
                }
            },
            RawCacheUse::Switch(true) | RawCacheUse::Other(_) => {
                self.err(raw.span(), k, "write `cache = { zone = \"NAME\" }` to cache in a zone, or `cache = false`");
                None
            }
        }
    }
}

/// Creates `dir` (and its parents) if missing and checks that a file can be
/// made in it.
fn writable_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot be created: {e}"))?;
    if !dir.is_dir() {
        return Err("is not a directory".into());
    }
    let probe = dir.join(format!(".tollgate-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("is not writable: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{CacheUse, parse};
    use std::path::Path;
    use std::time::Duration;

    const BASE: &str = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\ndefault_backend = \"b\"\n";

    fn errors(src: &str) -> Vec<String> {
        parse(src, Path::new("c.toml")).unwrap_err().0.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn zones_build_with_defaults_and_are_referred_to_by_name() {
        let src = format!(
            "{BASE}  [[frontend.rule]]\n  when = {{ path_prefix = \"/api/\" }}\n  cache = false\n\
             [[frontend.rule]]\n  when = {{ path_prefix = \"/img/\" }}\n  cache = {{ zone = \"small\" }}\n\
             [[backend]]\nname = \"b\"\ncache = {{ zone = \"main\" }}\n\
             [[backend]]\nname = \"plain\"\n\
             [[cache]]\nname = \"main\"\n\
             [[cache]]\nname = \"small\"\nmemory = \"1MiB\"\nmax_object = \"64KiB\"\nstore_set_cookie = true\n\
             heuristic_percent = 5\nheuristic_max = \"1h\"\nstale_if_error = \"10m\"\npurge_from = [\"10.0.0.0/8\", \"192.168.1.1\"]\n"
        );
        let c = parse(&src, Path::new("c.toml")).unwrap();
        assert_eq!(c.caches.len(), 2);
        let main = &c.caches[0];
        assert_eq!((main.memory, main.max_object), (64 << 20, 1 << 20));
        assert!(!main.store_set_cookie, "Set-Cookie responses are not stored by default");
        assert_eq!((main.heuristic_percent, main.heuristic_max), (10, Duration::from_secs(86_400)));
        assert_eq!(main.purge_from.len(), 2, "loopback, both families");
        assert!(main.purge_from.iter().any(|n| n.contains(&"127.0.0.1".parse::<std::net::IpAddr>().unwrap())));
        let small = &c.caches[1];
        assert_eq!((small.memory, small.max_object, small.store_set_cookie), (1 << 20, 64 << 10, true));
        assert_eq!((small.heuristic_percent, small.heuristic_max), (5, Duration::from_secs(3600)));
        assert_eq!((main.stale_if_error, small.stale_if_error), (Duration::ZERO, Duration::from_secs(600)));
        assert_eq!(small.purge_from.len(), 2);
        assert_eq!(c.backends[0].cache, Some(0));
        assert_eq!(c.backends[1].cache, None);
        let rules = &c.frontends[0].rules;
        assert_eq!(rules[0].cache, Some(CacheUse::Off));
        assert_eq!(rules[1].cache, Some(CacheUse::Zone(1)));
        assert!(rules[0].action.is_none(), "a rule with only `cache` is a rule");
    }

    #[test]
    fn rfc9213_the_targeted_field_is_cdn_cache_control_unless_named_or_turned_off() {
        let src = format!(
            "{BASE}[[backend]]\nname = \"b\"\ncache = {{ zone = \"main\" }}\n\
             [[cache]]\nname = \"main\"\n\
             [[cache]]\nname = \"own\"\ntargeted_cache_control = \"Tollgate-Cache-Control\"\n\
             strip_targeted_cache_control = false\n\
             [[cache]]\nname = \"off\"\ntargeted_cache_control = \"\"\n"
        );
        let c = parse(&src, Path::new("c.toml")).unwrap();
        let z = |i: usize| (c.caches[i].targeted_cache_control.as_deref(), c.caches[i].strip_targeted_cache_control);
        assert_eq!(z(0), (Some("cdn-cache-control"), true), "the default: heeded and stripped");
        assert_eq!(z(1), (Some("tollgate-cache-control"), false));
        assert_eq!(z(2).0, None);
        assert_eq!(c.caches[0].stale_if_error, Duration::ZERO, "no stale-if-error of the zone's own by default");
        for (bad, why) in [
            ("Cache-Control", "`Cache-Control` is not a targeted field"),
            ("expires", "`expires` is not a targeted field"),
            ("CDN Cache", "`CDN Cache` is not a field name"),
        ] {
            let text = errors(&format!("{BASE}[[cache]]\nname = \"main\"\ntargeted_cache_control = \"{bad}\"\n"));
            assert!(
                text.iter().any(|t| t.contains("cache[0].targeted_cache_control: ") && t.contains(why)),
                "{bad}: {text:#?}"
            );
        }
    }

    #[test]
    fn unknown_zones_and_bad_values_are_refused_with_line_and_key() {
        let src = format!(
            "{BASE}  [[frontend.rule]]\n  cache = {{ zone = \"nope\" }}\n\
             [[backend]]\nname = \"b\"\ncache = true\n\
             [[backend]]\nname = \"c\"\ncache = {{ zone = \"main\", ttl = 5 }}\n\
             [[cache]]\nname = \"main\"\nmemory = \"1KiB\"\n\
             [[cache]]\nname = \"main\"\nmemory = \"1MiB\"\nmax_object = \"2MiB\"\nheuristic_percent = 200\n\
             purge_from = [\"here\"]\n"
        );
        let text = errors(&src);
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(
            has("c.toml:6:11: frontend[0].rule[0].cache.zone: no cache zone is named `nope` (zones: main)"),
            "{text:#?}"
        );
        assert!(has("c.toml:9:9: backend[0].cache: write `cache = { zone = \"NAME\" }`"), "{text:#?}");
        assert!(has("backend[1].cache: write"), "unknown key in the table: {text:#?}");
        assert!(has("c.toml:15:10: cache[0].memory: must be at least 64KiB"), "{text:#?}");
        assert!(has("cache[1].name: cache zone `main` is defined twice"), "{text:#?}");
        assert!(has("cache[1].max_object: 2097152 bytes is more than the zone's memory"), "{text:#?}");
        assert!(has("cache[1].heuristic_percent: 200 is out of range"), "{text:#?}");
        assert!(has("cache[1].purge_from: `here` is not an address"), "{text:#?}");
        assert_eq!(text.len(), 8, "{text:#?}");
    }

    #[test]
    fn a_disk_tier_is_a_writable_directory_relative_to_the_config_and_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        let src = format!(
            "{BASE}[[backend]]\nname = \"b\"\n\
             [[cache]]\nname = \"a\"\nmemory = \"1MiB\"\nmax_object = \"8MiB\"\ndisk = {{ path = \"cache/a\", size = \"1GiB\" }}\n\
             [[cache]]\nname = \"b\"\n"
        );
        let c = parse(&src, &file).unwrap();
        let disk = c.caches[0].disk.as_ref().unwrap();
        assert_eq!(disk.path, dir.path().canonicalize().unwrap().join("cache/a"), "relative to the config file");
        assert!(disk.path.is_dir(), "created");
        assert_eq!((disk.size, c.caches[0].max_object), (1 << 30, 8 << 20), "objects larger than memory: disk only");
        assert!(c.caches[1].disk.is_none());
        assert!(std::fs::read_dir(&disk.path).unwrap().next().is_none(), "the write probe is gone");

        // A file where the directory should be, sizes, a shared or nested path.
        std::fs::write(dir.path().join("flat"), b"").unwrap();
        let src = format!(
            "{BASE}[[backend]]\nname = \"b\"\n\
             [[cache]]\nname = \"a\"\ndisk = {{ path = \"flat\", size = \"1GiB\" }}\n\
             [[cache]]\nname = \"b\"\ndisk = {{ path = \"d\", size = \"1KiB\" }}\n\
             [[cache]]\nname = \"c\"\ndisk = {{ path = \"d2\", size = \"1GiB\" }}\n\
             [[cache]]\nname = \"d\"\ndisk = {{ path = \"./d2\", size = \"1GiB\" }}\n\
             [[cache]]\nname = \"e\"\ndisk = {{ path = \"d2/inner\", size = \"1GiB\" }}\n\
             [[cache]]\nname = \"f\"\nmemory = \"1MiB\"\nmax_object = \"2MiB\"\ndisk = {{ path = \"f\", size = \"1MiB\" }}\n"
        );
        let text = parse(&src, &file).unwrap_err().0.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(has("c.toml:9:17: cache[0].disk.path: `"), "{text:#?}");
        assert!(has("flat` cannot be created"), "{text:#?}");
        assert!(has("c.toml:12:29: cache[1].disk.size: must be at least 1MiB"), "{text:#?}");
        assert!(has("c.toml:18:17: cache[3].disk.path: `"), "{text:#?}");
        assert!(has("is (or holds, or is inside) the disk of cache zone `c`"), "{text:#?}");
        assert!(has("c.toml:21:17: cache[4].disk.path"), "nested: {text:#?}");
        assert!(
            has("cache[5].max_object: 2097152 bytes is more than the zone's disk.size (1048576 bytes)"),
            "{text:#?}"
        );
        assert_eq!(text.len(), 5, "{text:#?}");
        let src = format!(
            "{BASE}[[backend]]\nname = \"b\"\n[[cache]]\nname = \"a\"\ndisk = {{ path = \"x\", size = \"1GiB\", mode = 1 }}\n"
        );
        let text = parse(&src, &file).unwrap_err().0.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        assert!(text[0].contains("c.toml:9:") && text[0].contains("mode"), "unknown key in disk: {text:#?}");
    }

    #[test]
    fn a_zone_needs_a_name_and_no_unknown_keys() {
        let text = errors(&format!("{BASE}[[backend]]\nname = \"b\"\n[[cache]]\nname = \"z\"\nsize = \"1MiB\"\n"));
        assert!(text[0].contains("c.toml:9") && text[0].contains("size"), "{text:#?}");
        let text = errors(&format!("{BASE}[[backend]]\nname = \"b\"\n[[cache]]\nmemory = \"1MiB\"\n"));
        assert!(text[0].contains("name"), "{text:#?}");
        let text = errors(&format!("{BASE}[[backend]]\nname = \"b\"\ncache = {{ zone = \"z\" }}\n"));
        assert!(text[0].contains("no cache zone is named `z` (there is no [[cache]] zone)"), "{text:#?}");
    }
}
