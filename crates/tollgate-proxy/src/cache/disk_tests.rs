//! Tests of the disk tier: the index (pure), and the store on a temporary
//! directory: write, read, eviction by bytes, corrupt and truncated files,
//! the index rebuilt after a restart, purge.

use super::*;
use crate::cache::store::Body;
use tollgate_wire::cache::head::{StoredHead, fmt_date};
use tollgate_wire::cache::policy::{self, Options, RequestFacts};
use tollgate_wire::cache::testing::H;

const T: u64 = 1_700_000_000;

/// A 200 for a request with headers `req`, with response fields `resp`
/// (plus `Date: date` and max-age=60) and a body of `body`.
fn object(req: &H, resp: &[(&str, &str)], date: u64, body: &[u8]) -> Arc<Object> {
    let fields = H::new(resp).with("Date", &fmt_date(date)).with("Cache-Control", "max-age=60");
    let m = policy::storable(&RequestFacts::new("GET", req), 200, &fields, date, date, &Options::default()).unwrap();
    let head = StoredHead::new(200, b"OK", fields.iter(), &m.omit, date);
    Object::of_request(req, head, Body::new(vec![Bytes::copy_from_slice(body)]), m).unwrap()
}

fn variant(obj: &Object) -> Variant {
    Variant::of(obj)
}

fn body_of(obj: &Object) -> Vec<u8> {
    obj.body.segments().iter().flat_map(|s| s.iter().copied()).collect()
}

// -- The index

#[test]
fn rfc9111_4_1_the_index_selects_the_newest_matching_variant() {
    let mut ix = Index::new(1 << 30);
    let gz = H::new(&[("Accept-Encoding", "gzip")]);
    let id = H::new(&[("Accept-Encoding", "identity")]);
    let vary = [("Vary", "Accept-Encoding")];
    assert!(ix.insert("k", variant(&object(&gz, &vary, T, b"g")), 1, 10).files.is_empty());
    ix.insert("k", variant(&object(&id, &vary, T, b"i")), 2, 10);
    assert_eq!(ix.find("k", &gz), Found::File(1));
    assert_eq!(ix.find("k", &id), Found::File(2));
    assert_eq!(ix.find("k", &H::new(&[("Accept-Encoding", "br")])), Found::VaryMiss);
    assert_eq!(ix.find("other", &gz), Found::UriMiss);
    // A newer response for the same variant replaces the file.
    let out = ix.insert("k", variant(&object(&gz, &vary, T + 5, b"g2")), 3, 10);
    assert_eq!(out.files, [1], "the replaced file is to be deleted");
    assert_eq!(out.evicted, 0);
    assert_eq!(ix.find("k", &gz), Found::File(3));
    // One without Vary replaces them all (it matches every request, and is newer).
    let out = ix.insert("k", variant(&object(&gz, &[], T + 6, b"n")), 4, 10);
    assert_eq!(out.files.len(), 2);
    assert_eq!(ix.find("k", &id), Found::File(4));
    assert_eq!((ix.live, ix.bytes), (1, BLOCK), "sizes count whole 4 KiB blocks");
}

#[test]
fn rfc9110_12_5_3_the_index_gives_a_request_without_accept_encoding_a_variant_it_accepts() {
    // The index knows each variant's Content-Encoding, from the object or
    // (after a restart) from its file's header.
    let gz = H::new(&[("Accept-Encoding", "gzip")]);
    let obj = object(&gz, &[("Vary", "Accept-Encoding"), ("Content-Encoding", "gzip")], T, b"g");
    let file = disk_file::encode("k", &obj, T);
    let header = disk_file::decode_header(&file[..file.len() - 1], file.len() as u64).unwrap();
    for v in [variant(&obj), Variant::from_header(&header)] {
        let mut ix = Index::new(1 << 30);
        ix.insert("k", v, 1, 10);
        assert_eq!(ix.find("k", &H::new(&[])), Found::File(1), "no Accept-Encoding: any coding");
        assert_eq!(ix.find("k", &H::new(&[("Accept-Encoding", "*")])), Found::File(1));
        assert_eq!(ix.find("k", &H::new(&[("Accept-Encoding", "*, gzip;q=0")])), Found::VaryMiss);
        assert_eq!(ix.find("k", &H::new(&[("Accept-Encoding", "br")])), Found::VaryMiss);
    }
}

#[test]
fn the_index_keeps_at_most_max_variants_per_key() {
    let mut ix = Index::new(1 << 30);
    for i in 0..MAX_VARIANTS as u64 + 2 {
        let req = H::new(&[("Accept-Language", &format!("l{i}"))]);
        ix.insert("k", variant(&object(&req, &[("Vary", "Accept-Language")], T + i, b"x")), i, 1);
    }
    assert_eq!(ix.live, MAX_VARIANTS);
    assert_eq!(ix.find("k", &H::new(&[("Accept-Language", "l0")])), Found::VaryMiss, "the oldest went first");
}

#[test]
fn eviction_keeps_the_bytes_bounded_and_gives_files_read_a_second_chance() {
    let plain = H::new(&[]);
    let mut ix = Index::new(4 * BLOCK);
    for i in 0..4 {
        assert_eq!(ix.insert(&format!("k{i}"), variant(&object(&plain, &[], T, b"x")), i, 100).evicted, 0);
    }
    // k0 is read: the CLOCK hand passes it over once.
    assert_eq!(ix.find("k0", &plain), Found::File(0));
    let out = ix.insert("k4", variant(&object(&plain, &[], T, b"x")), 4, 100);
    assert_eq!((out.files, out.evicted), (vec![1], 1), "k1, the oldest not read since");
    assert_eq!(ix.find("k0", &plain), Found::File(0));
    assert!(ix.bytes <= ix.capacity);
    // A file larger than a block counts its blocks.
    let out = ix.insert("big", variant(&object(&plain, &[], T, b"x")), 9, 2 * BLOCK + 1);
    assert_eq!(out.evicted, 3);
    assert!(ix.bytes <= ix.capacity && ix.find("big", &plain) == Found::File(9));
    // A smaller size evicts at once.
    // Both were read since the hand passed: each gets its second chance, then
    // the first in line (k0) goes.
    assert_eq!(ix.resize(3 * BLOCK), [0]);
    assert_eq!(ix.bytes, 3 * BLOCK);
}

#[test]
fn purges_by_key_prefix_and_file() {
    let plain = H::new(&[]);
    let mut ix = Index::new(1 << 30);
    for (i, k) in ["http://a/x", "http://a/y", "http://b/x"].iter().enumerate() {
        ix.insert(k, variant(&object(&plain, &[], T, b"x")), i as u64, 10);
    }
    let mut gone = ix.remove_prefix("http://a/");
    gone.sort_unstable();
    assert_eq!(gone, [0, 1]);
    assert_eq!(ix.find("http://a/x", &plain), Found::UriMiss);
    assert!(!ix.remove_file("http://b/x", 7), "another file: not this variant");
    assert!(ix.remove_file("http://b/x", 2));
    assert_eq!((ix.live, ix.bytes), (0, 0));
    assert!(ix.remove_key("http://b/x").is_empty());
}

/// The index's memory per object, measured as store.rs measures the memory
/// tier's (docs/configuration.md quotes it): 100,000 objects of 40-byte keys
/// without Vary.
#[test]
fn index_bytes_per_object() {
    let plain = H::new(&[]);
    let obj = object(&plain, &[], T, b"x");
    let mut ix = Index::new(u64::MAX);
    let n = 100_000u64;
    for i in 0..n {
        ix.insert(&format!("http://www.example.com/a/{i:016}"), variant(&obj), i, 1000);
    }
    let per = ix.index_bytes() as u64 / n;
    eprintln!("disk index: {per} bytes per object");
    assert!((100..=200).contains(&per), "{per} bytes per object");
}

// -- The store on a directory

async fn open(dir: &Path, size: u64) -> Arc<DiskStore> {
    let d = DiskStore::open(dir, size, 1 << 20, "t").unwrap();
    d.loaded().await;
    d
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if sub.path().is_dir() {
            out.extend(std::fs::read_dir(sub.path()).unwrap().flatten().map(|e| e.path()));
        }
    }
    out
}

async fn get(d: &DiskStore, key: &str, req: &H) -> Option<Arc<Object>> {
    match d.find(key, req) {
        Found::File(f) => d.read(key, f).await,
        Found::VaryMiss | Found::UriMiss => None,
    }
}

#[tokio::test]
async fn rfc9111_4_2_3_written_read_back_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let gz = H::new(&[("Accept-Encoding", "gzip")]);
    let obj = object(&gz, &[("Vary", "Accept-Encoding"), ("ETag", "\"e\"")], T, b"stored body");
    {
        let d = open(dir.path(), 1 << 20).await;
        assert!(d.write("http://a/x", &obj));
        d.flush().await;
        assert_eq!((d.objects(), d.bytes(), d.stats().writes.load(Relaxed)), (1, BLOCK, 1));
        let back = get(&d, "http://a/x", &gz).await.expect("a hit on disk");
        assert_eq!(body_of(&back), b"stored body");
        assert_eq!((&back.head, &back.meta), (&obj.head, &obj.meta), "head and Age bookkeeping");
        let br = H::new(&[("Accept-Encoding", "br")]);
        assert!(get(&d, "http://a/x", &br).await.is_none(), "another variant");
        assert_eq!(d.stats().hits.load(Relaxed), 1);
    }
    // A leftover of a write cut short, and a file that is not ours.
    std::fs::write(dir.path().join("00/0000000000000001.tmp"), b"half").unwrap();
    std::fs::write(dir.path().join("00/README"), b"mine").unwrap();
    let d = open(dir.path(), 1 << 20).await;
    assert_eq!(d.objects(), 1, "the index is rebuilt from the files");
    let back = get(&d, "http://a/x", &gz).await.expect("still stored after a restart");
    assert_eq!(body_of(&back), b"stored body");
    assert_eq!(back.meta.response_time, T, "the times are the stored ones");
    assert!(!dir.path().join("00/0000000000000001.tmp").exists(), "leftovers are deleted");
    assert!(dir.path().join("00/README").exists(), "other files are left alone");
    assert_eq!(d.stats().errors.load(Relaxed), 0);
}

#[tokio::test]
async fn corrupt_files_are_dropped_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let plain = H::new(&[]);
    let d = open(dir.path(), 1 << 20).await;
    for k in ["http://a/1", "http://a/2"] {
        d.write(k, &object(&plain, &[], T, b"0123456789"));
    }
    d.flush().await;
    let paths = files(dir.path());
    assert_eq!(paths.len(), 2);
    // One flipped bit in a body: found when read.
    let (mut first, second) = (std::fs::read(&paths[0]).unwrap(), std::fs::read(&paths[1]).unwrap());
    let last = first.len() - 1;
    first[last] ^= 1;
    std::fs::write(&paths[0], &first).unwrap();
    let (k0, k1) = (disk_file::decode_header(&first[..first.len() - 10], first.len() as u64).unwrap().key, {
        let h = disk_file::PREFIX + disk_file::header_len(&second).unwrap();
        disk_file::decode_header(&second[..h], second.len() as u64).unwrap().key
    });
    assert!(get(&d, &k0, &plain).await.is_none(), "a corrupt body is not served");
    d.flush().await;
    assert_eq!((d.stats().errors.load(Relaxed), d.objects()), (1, 1));
    assert!(!paths[0].exists(), "and its file is deleted");
    // A truncated file: dropped at the next start.
    std::fs::write(&paths[1], &second[..second.len() - 3]).unwrap();
    drop(d);
    let d = open(dir.path(), 1 << 20).await;
    assert_eq!((d.objects(), d.stats().errors.load(Relaxed)), (0, 1));
    assert!(get(&d, &k1, &plain).await.is_none());
    assert!(files(dir.path()).is_empty());
}

#[tokio::test]
async fn the_directory_stays_within_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let plain = H::new(&[]);
    let d = open(dir.path(), 8 * BLOCK).await;
    for i in 0..20 {
        d.write(&format!("http://a/{i}"), &object(&plain, &[], T, &[b'x'; 3000]));
    }
    d.flush().await;
    assert_eq!(d.objects(), 8);
    assert_eq!(d.stats().evictions.load(Relaxed), 12);
    assert_eq!(files(dir.path()).len(), 8, "evicted files are deleted");
    let on_disk: u64 = files(dir.path()).iter().map(|p| p.metadata().unwrap().len()).sum();
    assert!(on_disk <= 8 * BLOCK, "{on_disk}");
    assert!(get(&d, "http://a/19", &plain).await.is_some() && get(&d, "http://a/0", &plain).await.is_none());
    // A smaller size on a reload.
    d.resize(2 * BLOCK);
    d.flush().await;
    assert_eq!((d.objects(), files(dir.path()).len()), (2, 2));
}

#[tokio::test]
async fn purge_drops_files_by_url_and_prefix_even_while_writes_are_queued() {
    let dir = tempfile::tempdir().unwrap();
    let plain = H::new(&[]);
    let d = open(dir.path(), 1 << 20).await;
    for k in ["http://a/x", "http://a/y", "http://b/x"] {
        d.write(k, &object(&plain, &[], T, b"v"));
    }
    d.flush().await;
    assert_eq!(d.purge("http://b/x"), 1);
    assert_eq!(d.purge("http://b/x"), 0);
    // A write still queued when the purge comes is purged too.
    d.write("http://a/z", &object(&plain, &[], T, b"v"));
    d.purge_prefix("http://a/");
    d.flush().await;
    assert_eq!(d.objects(), 0);
    assert!(files(dir.path()).is_empty());
}
