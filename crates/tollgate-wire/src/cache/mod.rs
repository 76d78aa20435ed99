//! RFC 9111 as pure functions of header fields and times (the storage, the
//! request path's hooks and the zones are tollgate-proxy's `cache`).
//!
//! - [`control`]: the `Cache-Control` parser (fuzzed: fuzz/fuzz_targets/cache_control.rs).
//! - [`targeted`]: `CDN-Cache-Control` and other targeted fields (RFC 9213),
//!   a Structured Fields Dictionary read as this cache's own `Cache-Control`.
//! - [`policy`]: RFC 9111 (with RFC 9110's conditional requests and RFC 5861's
//!   stale directives).
//! - [`vary`]: secondary keys (RFC 9111 section 4.1), `Accept-Encoding` sets.
//! - [`head`]: a stored response head, as the bytes a hit writes.
//! - [`range`]: `Range` / `If-Range` answered from a stored full response
//!   (RFC 9110 section 14): 206, 416, or the whole.
//! - [`status`]: the `Cache-Status` field (RFC 9211).
//! - [`key`]: the primary key.

pub mod control;
pub mod head;
pub mod key;
pub mod policy;
pub mod range;
pub mod status;
pub mod targeted;
pub mod vary;

pub use control::CacheControl;
pub use head::StoredHead;
pub use key::primary_key;
pub use policy::{Decision, EntryMeta, HeadUpdate, NotStorable, Options, RequestFacts, StoreMeta, Why};
pub use status::{CacheStatus, Fwd};
pub use vary::Vary;

/// Header fields for the tests: (name, value) pairs behind [`HeaderLookup`].
///
/// [`HeaderLookup`]: tollgate_config::HeaderLookup
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    pub struct H(pub Vec<(String, String)>);

    impl H {
        pub fn new(list: &[(&str, &str)]) -> H {
            H(list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect())
        }
        pub fn with(mut self, name: &str, value: &str) -> H {
            self.0.push((name.to_string(), value.to_string()));
            self
        }
        pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
            self.0.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        }
    }

    impl tollgate_config::HeaderLookup for H {
        fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
            self.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).any(|(_, v)| f(v.as_bytes()))
        }
    }
}
