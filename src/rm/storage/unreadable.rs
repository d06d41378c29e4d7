//! Values a load could not read: kept byte for byte (see [`Unreadable`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::*;

/// A value a load could not read (an RDB or AOF written by another build, or damaged),
/// kept byte for byte instead of failing the whole load: it saves, rewrites, copies and
/// digests as those bytes, and every command on its key answers an error naming `reason`
/// until the key is deleted or expires (see `docs/operations.md`, "Values a server cannot
/// read"). Kept behind a header whose index no kind has.
pub struct Unreadable {
    pub reason: &'static str,
    pub bytes: Box<[u8]>,
}

/// Unreadable values held now, for `INFO ratelimit`.
pub static UNREADABLE: AtomicU64 = AtomicU64::new(0);

/// The pointer a key holds for `bytes` that could not be read, and why.
pub fn unreadable_into_raw(bytes: &[u8], reason: &'static str) -> Raw {
    UNREADABLE.fetch_add(1, Relaxed);
    tagged(
        Box::new(Headed {
            index: UNREADABLE_INDEX,
            state: Unreadable {
                reason,
                bytes: bytes.into(),
            },
        }),
        HEADER,
    )
}

/// The unreadable value behind `raw`, if that is what it is.
///
/// # Safety
/// `raw` must be null or a live value of this type, alive for `'a`.
#[inline(always)]
pub unsafe fn unreadable<'a>(raw: Raw) -> Option<&'a Unreadable> {
    if raw.is_null() || raw.addr() & TAGS != HEADER {
        return None;
    }
    let headed = raw.map_addr(|a| a & !TAGS).cast::<Headed<Unreadable>>();
    // SAFETY: a live `Headed` box; its index says whether it holds an `Unreadable`.
    unsafe {
        if (*headed).index != UNREADABLE_INDEX {
            return None;
        }
        Some(&(*headed).state)
    }
}

/// Frees an unreadable value; false (nothing done) for any other.
///
/// # Safety
/// As for [`free`].
pub(super) unsafe fn free_unreadable(raw: Raw) -> bool {
    // SAFETY: as the caller promises.
    if unsafe { unreadable(raw) }.is_none() {
        return false;
    }
    // SAFETY: a `Headed<Unreadable>` from `unreadable_into_raw`, now ours.
    drop(unsafe { Box::from_raw(raw.map_addr(|a| a & !TAGS).cast::<Headed<Unreadable>>()) });
    UNREADABLE.fetch_sub(1, Relaxed);
    true
}
