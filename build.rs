//! Build script: does nothing unless the `rocksdb-plugin` feature is on (plain `cargo build`
//! stays pure Rust). With it, compiles the C++ shim of `src/rocksdb/` against the RocksDB
//! source tree that `librocksdb-sys` bundles — found through `DEP_ROCKSDB_CARGO_MANIFEST_DIR`,
//! which cargo gives to crates that depend on `librocksdb-sys` (`links = "rocksdb"`) directly.
//!
//! Two files, so the dependency on RocksDB's internal headers is visible and contained:
//! - `shim_public.cc` uses public headers only: registration with RocksDB's object library and
//!   the per-level policy over RocksDB's own Bloom/Ribbon filters;
//! - `shim_internal.cc` needs `table/block_based/filter_policy_internal.h` (where
//!   `FilterBitsBuilder` / `FilterBitsReader` live since RocksDB 7.0): lsm-bloom's own filter
//!   blocks. It is pinned to the RocksDB of `librocksdb-sys =0.19.0` (11.8.1); a RocksDB whose
//!   internal interface changed fails this build loudly rather than misbehaving.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "rocksdb-plugin")]
    plugin::build();
}

#[cfg(feature = "rocksdb-plugin")]
mod plugin {
    use std::path::PathBuf;

    pub fn build() {
        let Some(dir) = std::env::var_os("DEP_ROCKSDB_CARGO_MANIFEST_DIR") else {
            panic!(
                "feature rocksdb-plugin: DEP_ROCKSDB_CARGO_MANIFEST_DIR is not set; the crate \
                 must depend on librocksdb-sys directly (Cargo.toml pins =0.19.0)"
            );
        };
        let root = PathBuf::from(dir).join("rocksdb");
        let internal = root.join("table/block_based/filter_policy_internal.h");
        assert!(
            internal.exists(),
            "feature rocksdb-plugin: {} not found: the bundled RocksDB source tree is not \
             where librocksdb-sys 0.19.0 keeps it",
            internal.display()
        );
        let sources = ["src/rocksdb/shim_public.cc", "src/rocksdb/shim_internal.cc"];
        for s in sources.iter().chain(&["src/rocksdb/shim.h"]) {
            println!("cargo:rerun-if-changed={s}");
        }
        let mut cc = cc::Build::new();
        cc.cpp(true)
            .files(sources)
            .include(root.join("include"))
            .include(&root)
            .include("src/rocksdb")
            // The flags librocksdb-sys compiles RocksDB with, where they decide what the
            // headers declare (class layouts must match the library's).
            .flag("-std=c++20")
            .flag("-include")
            .flag("cstdint")
            .define("NDEBUG", Some("1"))
            .define("HAVE_ALIGNED_NEW", None)
            .flag_if_supported("-Wno-unused-parameter")
            .flag_if_supported("-Wno-invalid-offsetof");
        let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
        if os == "linux" {
            cc.define("OS_LINUX", None);
        }
        if std::env::var("CARGO_CFG_TARGET_FAMILY").as_deref() == Ok("unix") {
            cc.define("ROCKSDB_PLATFORM_POSIX", None)
                .define("ROCKSDB_LIB_IO_POSIX", None);
        }
        cc.compile("lsm_bloom_rocksdb_shim");
    }
}
