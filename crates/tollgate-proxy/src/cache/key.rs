//! The primary cache key: below the policy and the store, which both need it.

/// The primary cache key (RFC 9111 section 2: the target URI): scheme, host
/// (lower case, without the scheme's default port) and the origin-form target
/// as the data path has it. The method is not part of it: HEAD is answered
/// from a stored GET.
pub fn primary_key(scheme: &str, host: &str, target: &str) -> String {
    let scheme = scheme.to_ascii_lowercase();
    let mut host = host.to_ascii_lowercase();
    let default = if scheme == "https" { ":443" } else { ":80" };
    if host.ends_with(default) {
        host.truncate(host.len() - default.len());
    }
    let target = if target.is_empty() { "/" } else { target };
    format!("{scheme}://{host}{target}")
}
