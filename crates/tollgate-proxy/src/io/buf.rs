//! Connection read buffers: fixed 16 KiB blocks (HAProxy's `tune.bufsize`), grown
//! only for a message head larger than that (up to `limits.max_header_size`), and
//! recycled through a small per-thread free list so a new connection neither
//! allocates nor zeroes one.

use std::cell::RefCell;

pub const BUF_SIZE: usize = 16 * 1024;
/// Free blocks kept per worker thread.
const FREE_MAX: usize = 256;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Bytes read from a socket and not yet used: `data[start..end]`.
pub struct Buf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for Buf {
    fn default() -> Self {
        Self::new()
    }
}

impl Buf {
    pub fn new() -> Self {
        Buf { data: take_block(), start: 0, end: 0 }
    }

    /// A buffer without a block, for a connection that reads no more through
    /// it (a tunnel relays with blocks of its own): no room, nothing held.
    pub fn none() -> Self {
        Buf { data: Vec::new(), start: 0, end: 0 }
    }

    /// The unused bytes.
    pub fn data(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Marks `n` bytes as used.
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Room to read into (moving unused bytes to the front when that makes room);
    /// empty when the buffer is full.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.end == self.data.len() && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.data[self.end..]
    }

    /// `n` bytes were read into [`Buf::spare`].
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.data.len());
    }

    /// Whether the buffer has no room left even after compaction.
    pub fn is_full(&self) -> bool {
        self.start == 0 && self.end == self.data.len()
    }

    /// Makes the buffer at least `n` bytes (for streaming a large body, where
    /// bigger reads and writes mean fewer system calls). The buffer keeps that
    /// size while its connection lives (an idle server connection in the pool
    /// included) and is freed, not recycled, with it.
    pub fn reserve_total(&mut self, n: usize) {
        if self.data.len() < n {
            self.data.resize(n, 0);
        }
    }

    /// Grows a full buffer (for a large message head), up to `max` bytes in all.
    /// Returns false when it is already that large.
    pub fn grow(&mut self, max: usize) -> bool {
        let cap = self.data.len();
        if cap >= max {
            return false;
        }
        self.data.resize((cap * 2).min(max), 0);
        true
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        give_block(std::mem::take(&mut self.data));
    }
}

/// A `BUF_SIZE` block from this thread's free list, or a new one.
pub fn take_block() -> Vec<u8> {
    FREE.with(|f| f.borrow_mut().pop()).unwrap_or_else(|| vec![0; BUF_SIZE])
}

/// Gives a block back to this thread's free list (kept when it is a
/// `BUF_SIZE` block, whatever its length now, and the list has room; freed
/// otherwise).
pub fn give_block(mut data: Vec<u8>) {
    if data.capacity() == BUF_SIZE {
        data.resize(BUF_SIZE, 0);
        // At thread exit the free list may be gone before a buffer held by
        // another thread local (an idle connection in the upstream pool).
        let _ = FREE.try_with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < FREE_MAX {
                f.push(data);
            }
        });
    }
}

/// Blocks in this thread's free list.
#[cfg(test)]
pub(crate) fn free_blocks() -> usize {
    FREE.with(|f| f.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_compact_grow() {
        let mut b = Buf::new();
        let n = b.spare().len();
        assert_eq!(n, BUF_SIZE);
        b.spare()[..5].copy_from_slice(b"hello");
        b.commit(5);
        b.consume(2);
        assert_eq!(b.data(), b"llo");
        b.consume(3);
        assert!(b.is_empty());
        b.commit(BUF_SIZE);
        assert!(b.is_full() && b.spare().is_empty());
        assert!(b.grow(BUF_SIZE * 3));
        assert_eq!(b.spare().len(), BUF_SIZE);
        assert!(b.grow(BUF_SIZE * 3));
        assert!(!b.grow(BUF_SIZE * 3));
    }
}
