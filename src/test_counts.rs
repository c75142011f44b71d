//! Unit tests' iteration counts: the full ones with `LSM_BLOOM_THOROUGH` set (as `.ci/run`
//! sets it), a quicker share of the same checks in a plain `cargo test`.

/// `full` with `LSM_BLOOM_THOROUGH` set, else `quick`.
pub(crate) fn scaled<T>(full: T, quick: T) -> T {
    match std::env::var_os("LSM_BLOOM_THOROUGH") {
        Some(v) if v != "0" => full,
        _ => quick,
    }
}
