//! Taking a lock of the store.

use std::sync::{Mutex, MutexGuard};

/// Tolerates poisoning: a panic elsewhere is reported through `ErrorState`, and the data each
/// lock guards stays consistent because every update is a single assignment or push.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
