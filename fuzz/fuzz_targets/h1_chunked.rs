//! The chunked-body walker on arbitrary bytes, fed in two pieces split at every
//! place the first byte chooses (its top bit: as a request's body, refusing
//! framing trailers): no panic, and the same outcome whatever the split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_wire::h1::Chunked;

fn walk(body: &[u8], split: usize, request: bool) -> Result<(usize, Vec<u8>), tollgate_wire::h1::ChunkError> {
    let mut c = Chunked::new();
    if request {
        c.refuse_framing_trailers();
    }
    let mut data = Vec::new();
    let mut used = 0;
    for part in [&body[..split], &body[split..]] {
        if c.is_done() {
            break;
        }
        used += c.feed(part, |r| data.extend_from_slice(&part[r]))?;
    }
    Ok((used, data))
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else { return };
    let split = (first & 0x7f) as usize % (body.len() + 1);
    let request = first & 0x80 != 0;
    let whole = walk(body, body.len(), request);
    let halves = walk(body, split, request);
    match (&whole, &halves) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("split {split} changed the outcome: {whole:?} vs {halves:?}"),
    }
});
