//! The names of the store's files in its directory (FORMAT.md §4 lists them all).

use std::path::{Path, PathBuf};

/// Table `id`'s file.
pub(crate) fn table_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.sst"))
}
