//! Arbitrary bytes as a peer's side of a Raft transport connection: frames read one after
//! another and their payloads decoded, never a panic, and never an allocation bigger than
//! the bytes justify (this binary's allocator records the largest one of each run).
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;

/// The system allocator, noting the largest block asked for.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

fuzz_target!(|data: &[u8]| {
    LARGEST.store(0, Ordering::Relaxed);
    bourse_cluster::fuzzing::read_frames(data);
    let largest = LARGEST.load(Ordering::Relaxed);
    let bound = bourse_cluster::fuzzing::allocation_bound(data.len());
    assert!(largest <= bound, "an allocation of {largest} bytes for {} input bytes", data.len());
});
