//! The process's allocator: a fixed arena for small blocks in front of the system allocator.
//!
//! A short run (`exec k -- true`, one `acquire`) makes a few thousand small allocations and
//! exits. musl's malloc, which the static binary carries, maps and unmaps pages for them as its
//! groups fill and empty: a fifth of such a run's CPU time went to malloc, free and those
//! `mmap`/`munmap` calls. So a small block (up to 64 KiB) comes from one arena in `.bss`, whose
//! pages are touched, and cost, only as it fills: a power-of-two size class, cut at the arena's
//! end or taken back from the class's free list. Once the arena is spent, and for bigger blocks,
//! the system allocator serves, as before.
//!
//! Invariants:
//! - A block is in the arena or the system's, told apart by its address alone; each is freed
//!   (and grown) by the allocator that gave it.
//! - A freed block of the arena is reused by its class only: what a long run can hold in the
//!   arena is bounded by [`ARENA_BYTES`], and its memory is never returned to the system.
//! - No allocation inside the lock of the free lists, and no panic: the lock is never poisoned
//!   and never taken twice by one thread. (No signal handler of ours allocates.)
//!
//! Layer 0 of the list in `lib.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The arena's size: what a short run takes from it, with room to spare (`exec k -- true`
/// takes 560 KiB: its blocks rounded up to their classes, and each class's own).
pub const ARENA_BYTES: usize = 1024 * 1024;

/// The size classes: 16, 32, ... 64 KiB (clap's tables, the connection's buffers). A bigger
/// block, or one aligned to more than [`ALIGN`], is the system's.
const CLASSES: usize = 13;
const SMALLEST: usize = 16;
const ALIGN: usize = 16;

/// A [`GlobalAlloc`]: blocks of a power-of-two size class cut from a fixed arena of `N` bytes
/// and reused through one free list per class; what does not fit, the system's allocator. `N`
/// is a parameter so that the tests can spend a small one.
#[repr(C, align(16))]
pub struct Arena<const N: usize = ARENA_BYTES> {
    bytes: UnsafeCell<[u8; N]>,
    /// Offset of the first byte never handed out.
    used: AtomicUsize,
    /// Each class's free blocks: the address of the first (0: none); each free block holds the
    /// next one's address in its first word.
    free: Mutex<[usize; CLASSES]>,
}

// SAFETY: the bytes are only reached through blocks handed out once each (the bump pointer
// moves by compare-and-swap, the free lists change under their lock), so no two threads share
// a block unless the program shares it.
unsafe impl<const N: usize> Sync for Arena<N> {}

impl<const N: usize> Arena<N> {
    /// An empty arena (all zeros: in `.bss` for a static, no page touched yet).
    pub const fn new() -> Self {
        Arena {
            bytes: UnsafeCell::new([0; N]),
            used: AtomicUsize::new(0),
            free: Mutex::new([0; CLASSES]),
        }
    }

    fn base(&self) -> usize {
        self.bytes.get() as usize
    }

    /// Whether `ptr` was cut from this arena.
    fn owns(&self, ptr: *mut u8) -> bool {
        (self.base()..self.base() + N).contains(&(ptr as usize))
    }

    /// The size class of `layout`, if the arena serves it.
    fn class(layout: Layout) -> Option<usize> {
        if layout.align() > ALIGN {
            return None;
        }
        let size = layout.size().max(SMALLEST).next_power_of_two();
        let class = (size / SMALLEST).trailing_zeros() as usize;
        (class < CLASSES).then_some(class)
    }

    fn class_size(class: usize) -> usize {
        SMALLEST << class
    }

    fn free_lists(&self) -> std::sync::MutexGuard<'_, [usize; CLASSES]> {
        // Nothing panics while the lock is held.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of `class` from the arena, and whether it is new (all zeros: never handed out)
    /// rather than freed before; `None` when the arena is spent.
    fn take(&self, class: usize) -> Option<(*mut u8, bool)> {
        {
            let mut free = self.free_lists();
            let head = free[class];
            if head != 0 {
                // SAFETY: a free block of this arena, aligned, whose first word `give` wrote.
                free[class] = unsafe { *(head as *const usize) };
                return Some((head as *mut u8, false));
            }
        }
        let size = Self::class_size(class);
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            // The base is aligned to ALIGN and every size is a multiple of it.
            let end = used + size;
            if end > N {
                return None;
            }
            match self
                .used
                .compare_exchange_weak(used, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                // The offset is within the array (end <= N), so the pointer stays in bounds.
                Ok(_) => return Some((self.bytes.get().cast::<u8>().wrapping_add(used), true)),
                Err(now) => used = now,
            }
        }
    }

    /// Puts `ptr`, a block of the arena at least `class`'s size, on `class`'s free list.
    fn give(&self, ptr: *mut u8, class: usize) {
        let mut free = self.free_lists();
        // SAFETY: the caller's block, no longer used, aligned to ALIGN and at least 16 bytes.
        unsafe { *(ptr as *mut usize) = free[class] };
        free[class] = ptr as usize;
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every block handed out is at least `layout.size()` bytes aligned to `layout.align()`
// (a class's size is at least the size asked and a multiple of ALIGN), inside the arena and
// given to no one else until freed, or the system allocator's; a block is freed or grown by the
// allocator that made it (`owns`). A block's true class is never smaller than the class of the
// layout it is freed or grown with, so a free list holds blocks at least its class's size.
unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::class(layout).and_then(|class| self.take(class)) {
            Some((ptr, _)) => ptr,
            // SAFETY: the caller's layout has a non-zero size, as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    /// A new block is zeros already: left untouched, its pages cost nothing until used (the
    /// 64 KiB stack `spawn` gives its child, of which the child uses a few hundred bytes).
    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match Self::class(layout).and_then(|class| self.take(class)) {
            Some((ptr, true)) => ptr,
            Some((ptr, false)) => {
                // SAFETY: a block of at least layout.size() bytes, ours until freed.
                unsafe { ptr.write_bytes(0, layout.size()) };
                ptr
            }
            // SAFETY: the caller's layout has a non-zero size, as GlobalAlloc requires.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match Self::class(layout) {
            Some(class) if self.owns(ptr) => self.give(ptr, class),
            // SAFETY: not ours, so the system's, with the layout it was allocated with.
            _ => unsafe { System.dealloc(ptr, layout) },
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.owns(ptr) {
            // SAFETY: the system's block, with its layout; the caller's new size is valid.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // A block of the arena has a class; it stays in place while the new size fits it.
        if Self::class(layout).is_some_and(|class| new_size <= Self::class_size(class)) {
            return ptr;
        }
        // SAFETY: the alignment is the block's, valid; the caller guarantees the new size
        // does not overflow when rounded up to it.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: new_size is more than the block's class, so not zero.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: two distinct live blocks; the old one's layout.size() bytes fit the new.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_and_distinct_then_the_system_takes_over() {
        let arena = Box::new(Arena::<4096>::new());
        let mut blocks = Vec::new();
        for (size, align) in [(1, 1), (24, 8), (3, 2), (100, 16), (7, 4), (1000, 8)] {
            let l = layout(size, align);
            let p = unsafe { arena.alloc(l) };
            assert!(arena.owns(p), "{l:?}");
            assert_eq!(p as usize % align, 0);
            unsafe { p.write_bytes(0xa5, size) };
            blocks.push((p, l));
        }
        blocks.sort_by_key(|(p, _)| *p as usize);
        for pair in blocks.windows(2) {
            let ((a, la), (b, _)) = (pair[0], pair[1]);
            assert!(a as usize + la.size() <= b as usize, "blocks overlap");
        }
        // Too big for what is left, too big for a class, or aligned to more: the system's.
        for l in [layout(4000, 8), layout(100_000, 8), layout(32, 64)] {
            let p = unsafe { arena.alloc(l) };
            assert!(!p.is_null() && !arena.owns(p), "{l:?}");
            unsafe { arena.dealloc(p, l) };
        }
        for (p, l) in blocks {
            unsafe { arena.dealloc(p, l) };
        }
    }

    #[test]
    fn a_freed_block_is_reused_by_its_class() {
        let arena = Box::new(Arena::<4096>::new());
        let a = unsafe { arena.alloc(layout(20, 8)) };
        let b = unsafe { arena.alloc(layout(20, 8)) };
        unsafe { arena.dealloc(a, layout(20, 8)) };
        // Another class does not take it; the same class does.
        let c = unsafe { arena.alloc(layout(64, 8)) };
        assert_ne!(c, a);
        let d = unsafe { arena.alloc(layout(32, 8)) };
        assert_eq!(d, a);
        for (p, size) in [(b, 20), (c, 64), (d, 32)] {
            unsafe { arena.dealloc(p, layout(size, 8)) };
        }
    }

    #[test]
    fn a_block_grows_in_its_class_then_moves_with_its_bytes() {
        let arena = Box::new(Arena::<4096>::new());
        let a = unsafe { arena.alloc(layout(17, 8)) };
        unsafe { a.write_bytes(7, 17) };
        let b = unsafe { arena.realloc(a, layout(17, 8), 32) };
        assert_eq!(a, b, "within its class (32)");
        let c = unsafe { arena.realloc(b, layout(32, 8), 33) };
        assert_ne!(c, b);
        assert!(arena.owns(c));
        assert_eq!(unsafe { std::slice::from_raw_parts(c, 17) }, [7; 17]);
        // Shrunk in place, then freed with its smaller layout: a smaller class gets it.
        let d = unsafe { arena.realloc(c, layout(33, 8), 10) };
        assert_eq!(c, d);
        unsafe { arena.dealloc(d, layout(10, 8)) };
        assert_eq!(unsafe { arena.alloc(layout(16, 8)) }, d);
        // Past a class, to the system, bytes kept; then the system grows it.
        let e = unsafe { arena.alloc(layout(24, 8)) };
        unsafe { e.write_bytes(9, 24) };
        let f = unsafe { arena.realloc(e, layout(24, 8), 100_000) };
        assert!(!arena.owns(f));
        assert_eq!(unsafe { std::slice::from_raw_parts(f, 24) }, [9; 24]);
        let g = unsafe { arena.realloc(f, layout(100_000, 8), 200_000) };
        assert_eq!(unsafe { std::slice::from_raw_parts(g, 24) }, [9; 24]);
        unsafe { arena.dealloc(g, layout(200_000, 8)) };
    }

    #[test]
    fn threads_get_disjoint_blocks() {
        static ARENA: Arena<{ 64 * 1024 }> = Arena::new();
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..600 {
                        let p = unsafe { ARENA.alloc(layout(24, 8)) };
                        unsafe { p.write_bytes(t, 24) };
                        // Every third block goes back, for another thread to take.
                        if i % 3 == 0 {
                            unsafe { ARENA.dealloc(p, layout(24, 8)) };
                        } else {
                            mine.push(p as usize);
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<(usize, u8)> = threads
            .into_iter()
            .enumerate()
            .flat_map(|(t, h)| h.join().unwrap().into_iter().map(move |p| (p, t as u8)))
            .collect();
        all.sort();
        for pair in all.windows(2) {
            assert!(pair[0].0 + 24 <= pair[1].0, "blocks overlap");
        }
        for (p, t) in all {
            let block = unsafe { std::slice::from_raw_parts(p as *const u8, 24) };
            assert!(
                block.iter().all(|&b| b == t),
                "a block was written by another thread"
            );
        }
    }
}
