//! An RFC 9111 shared cache: the storage, here; the pure policy in
//! tollgate-wire's `cache` (`Cache-Control` and targeted fields, freshness and
//! storability, `Vary`, ranges, stored heads, `Cache-Status`, the key); the
//! request path's hooks in the pipeline (`pipeline::serve`: the request phase
//! calls it at the same four `cache hook` points for both protocols, and each
//! session writes what it answers in its own framing).
//!
//! ## Pieces
//! - [`store`]: the memory tier (S3-FIFO, bounded in bytes), purge.
//! - [`disk`]: the disk tier (a file per response, an index in memory, CLOCK,
//!   kept across restarts); [`disk_file`] its file format (pure).
//! - [`coalesce`]: one origin request for N concurrent misses.
//! - [`zone`]: a `[[cache]]` zone at run time: store, flights, counters; kept
//!   across reloads.
//!
//! ## How the data path calls it (pipeline/serve.rs, from the request phase after
//! routing picked a backend with a cache zone and Basic auth passed)
//! ```text
//! req = RequestFacts::new(method, &head.fields)
//! if let Some(why) = req.bypass():                 forward; Cache-Status fwd=bypass/method
//!     after an unsafe method's response: for key in invalidations(..): store.purge(key)
//! key = key::primary_key(scheme, host, target)      scheme: https for a request over TLS
//! found = zone.get(&key, &head.fields).await       Hit(obj) | VaryMiss | UriMiss
//!                                                   (memory, then the disk tier's index and file)
//! entry = Hit(obj) if acceptable_coding(&req, &obj.meta)
//! match lookup_decision(&req, entry.meta, now):
//!   Fresh | StaleAllowed =>
//!       client_wants_304(&req, &obj.meta) ? write not_modified_head(&obj.head)
//!                                          : obj.head.write_response(out, age_header(..),
//!                                            obj.body.len(), cache_status, close), then
//!                                            the body segments (none for HEAD);
//!       with Range: range::answer(&req, &obj.meta, len) -> 206 (a slice of the
//!                                            body, Content-Range) | 416 | the whole
//!       Cache-Status: hit; ttl=ttl(..)
//!   StaleWhileRevalidate => as Fresh, and spawn one background revalidation
//!       (coalescer.join(&key): only the leader revalidates)
//!   Revalidate(why) =>
//!       conditional_headers(&[&obj.meta]).apply(&mut fields); send
//!       304   => idx = select_for_304(&resp.fields, &[&obj.meta]);
//!                empty: resend unconditionally; else
//!                (head, meta) = revalidated(&obj.head, resp.fields.iter(), t0, t1, &opts);
//!                obj = store.update(&key, &obj, head, meta); serve obj as Fresh
//!       error / 5xx and stale_if_error(&req, &obj.meta, now, &opts) => serve obj stale
//!       else  => as a miss with this response
//!       Cache-Status: fwd=stale (or fwd=request for Why::Request*)
//!   Miss =>
//!       coalescer.join(&key): Follower -> wait(limit): Ok(obj) -> serve as a hit
//!                                   (if obj.matches(req)), Err -> forward alone
//!                             Leader   -> forward
//!       Cache-Status: fwd=uri-miss / fwd=vary-miss
//!   GatewayTimeout => 504 (only-if-cached)
//! on a forwarded GET's response:
//!   storable(&req, status, &resp.fields, t0, t1, &opts):
//!     Ok(m)  => head = StoredHead::new(status, reason, resp.fields.iter(), &m.omit, t1);
//!               stream the body to the client while keeping its segments;
//!               once its last bytes are read (before they reach the client), if
//!               body_complete(..): zone.put(&key, &req_fields, head, Body::new(segs), m)
//!               (memory, and a write queued to the disk tier)
//!               leader.stored(obj); Cache-Status adds `stored`
//!     Err(e) => leader.not_stored(); Cache-Status detail=e.as_str()
//! on a forwarded HEAD's 200 with a stored GET (section 4.3.5):
//!   head_update(&resp.fields, &obj.meta, obj.body.len()):
//!     Update => revalidated(..) then store.update(..); Invalidate => store.purge(&key)
//! ```
//! Times are Unix seconds: `t0` when the request went to the origin, `t1` when
//! the response head arrived (RFC 9111 section 4.2.3).
//!
//! Not done yet: validating several stored variants at once (one is
//! validated: the one the request selected), multipart/byteranges (several
//! ranges get the full response, range.rs).

pub mod coalesce;
pub mod disk;
pub mod disk_file;
pub mod store;
pub mod tier;
pub mod zone;

pub use coalesce::{Coalescer, Fallthrough, Role};
pub use store::{Body, Lookup, Object, Store};
pub use zone::{CacheReport, DiskReport, Zone};
