//! A bump arena on the stack, for the few values of different types that one call makes
//! and drops together (`RL.ALL`'s limiters, one of its command's each): no heap allocation
//! for them, which on a call of a few microseconds is a measurable part.

use std::cell::{Cell, UnsafeCell};
use std::mem::{align_of, needs_drop, size_of, MaybeUninit};

use smallvec::SmallVec;

/// Room for values of `WORDS` 8-byte words in all, each 8-byte aligned; a value that does
/// not fit (or needs a larger alignment) goes to the heap instead. Every value is dropped
/// with the arena, the last made first.
pub struct Arena<const WORDS: usize> {
    buf: UnsafeCell<[MaybeUninit<u64>; WORDS]>,
    /// Words of `buf` taken.
    used: Cell<usize>,
    /// How to drop each value that needs it, in the order they were made.
    drops: UnsafeCell<SmallVec<[Dropper; 16]>>,
}

/// A value of the arena's (or a box it made) and the function that drops it.
struct Dropper {
    at: *mut u8,
    drop: unsafe fn(*mut u8),
}

/// Drops the `T` at `at`, in place.
///
/// # Safety
/// `at` must point at a live `T` in the arena, dropped once.
unsafe fn drop_in_arena<T>(at: *mut u8) {
    // SAFETY: as the caller promises.
    unsafe { std::ptr::drop_in_place(at.cast::<T>()) }
}

/// Drops and frees the boxed `T` at `at`.
///
/// # Safety
/// `at` must come from `Box::<T>::into_raw`, freed once.
unsafe fn drop_boxed<T>(at: *mut u8) {
    // SAFETY: as the caller promises.
    drop(unsafe { Box::from_raw(at.cast::<T>()) })
}

impl<const WORDS: usize> Arena<WORDS> {
    pub fn new() -> Self {
        Arena {
            buf: UnsafeCell::new([const { MaybeUninit::uninit() }; WORDS]),
            used: Cell::new(0),
            drops: UnsafeCell::new(SmallVec::new()),
        }
    }

    /// Moves `value` into the arena: a reference to it for as long as the arena is
    /// borrowed, each disjoint from every other.
    #[allow(clippy::mut_from_ref)] // each value has its own room, lent once
    pub fn put<T>(&self, value: T) -> &mut T {
        let words = size_of::<T>().div_ceil(8);
        let used = self.used.get();
        let at: *mut T = if align_of::<T>() <= 8 && words <= WORDS - used {
            self.used.set(used + words);
            // SAFETY: words `used .. used + words` of `buf` are taken by no other value
            // (`used` only grows), inside the buffer, and 8-byte aligned.
            let at = unsafe { self.buf.get().cast::<u64>().add(used).cast::<T>() };
            // SAFETY: room for a `T`, uninitialised until now.
            unsafe { at.write(value) };
            if needs_drop::<T>() {
                self.remember(at.cast(), drop_in_arena::<T>);
            }
            at
        } else {
            let at = Box::into_raw(Box::new(value));
            self.remember(at.cast(), drop_boxed::<T>);
            at
        };
        // SAFETY: a live `T` that only this reference reaches, until the arena drops it,
        // which it cannot while the reference (a borrow of the arena) lives.
        unsafe { &mut *at }
    }

    fn remember(&self, at: *mut u8, drop: unsafe fn(*mut u8)) {
        // SAFETY: `drops` is only reached here and in `drop`, never lent out, and the
        // arena is not `Sync`: no other reference to it exists during this push.
        unsafe { (*self.drops.get()).push(Dropper { at, drop }) }
    }
}

impl<const WORDS: usize> Default for Arena<WORDS> {
    fn default() -> Self {
        Arena::new()
    }
}

impl<const WORDS: usize> Drop for Arena<WORDS> {
    fn drop(&mut self) {
        for d in self.drops.get_mut().iter().rev() {
            // SAFETY: each value was made by `put` and is dropped here once; no reference
            // to it lives (they borrowed the arena, which is being dropped).
            unsafe { (d.drop)(d.at) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn values_are_disjoint_and_dropped_once() {
        let counted = Rc::new(());
        {
            let arena = Arena::<8>::new();
            let a = arena.put([1u64; 3]);
            let b = arena.put(Rc::clone(&counted));
            // Past its room: on the heap, dropped all the same.
            let c = arena.put([7u64; 6]);
            let d = arena.put(Rc::clone(&counted));
            a[0] = 2;
            assert_eq!((a[0], a[2], c[5]), (2, 1, 7));
            assert_eq!(Rc::strong_count(&counted), 3);
            let _ = (b, d);
        }
        assert_eq!(Rc::strong_count(&counted), 1);
    }
}
