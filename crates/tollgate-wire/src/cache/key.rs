//! The primary cache key: below the policy and the store, which both need it.

/// The primary cache key (RFC 9111 section 2: the target URI): scheme, host
/// (lower case, without the scheme's default port) and the origin-form target
/// as the data path has it. The method is not part of it: HEAD is answered
/// from a stored GET.
pub fn primary_key(scheme: &str, host: &str, target: &str) -> String {
    let default = if scheme.eq_ignore_ascii_case("https") { ":443" } else { ":80" };
    let target = if target.is_empty() { "/" } else { target };
    // One allocation: this runs for every request the cache looks up.
    let mut key = String::with_capacity(scheme.len() + 3 + host.len() + target.len());
    key.push_str(scheme);
    key.push_str("://");
    key.push_str(host);
    key.make_ascii_lowercase();
    if key.ends_with(default) {
        key.truncate(key.len() - default.len());
    }
    key.push_str(target);
    key
}
