// The C interface between the C++ shim and lsm-bloom's Rust side (src/rocksdb/ffi/).
// Rust implements every lsm_bloom_rdb_* function; none of them unwinds (panics are caught
// and answered safely). The shim implements lsm_bloom_shim_*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" {

struct LsmBloomRustPolicy;
struct LsmBloomRustBuilder;
struct LsmBloomRustReader;
struct LsmBloomKey {
  const char* data;
  size_t len;
};

// Family of a parsed policy: which shim class serves it.
enum { kLsmBloomFamilyFilter = 0, kLsmBloomFamilyBuiltinBloom = 1, kLsmBloomFamilyBuiltinRibbon = 2 };

LsmBloomRustPolicy* lsm_bloom_rdb_policy_new(const char* name, size_t len, int32_t* family,
                                             char* err, size_t err_cap);
void lsm_bloom_rdb_policy_free(LsmBloomRustPolicy* p);
double lsm_bloom_rdb_policy_builtin_bits(const LsmBloomRustPolicy* p, int32_t level,
                                         bool bottommost, int32_t num_levels, bool leveled);

LsmBloomRustBuilder* lsm_bloom_rdb_builder_new(const LsmBloomRustPolicy* p, int32_t level,
                                               bool bottommost, int32_t num_levels,
                                               bool leveled);
void lsm_bloom_rdb_builder_add_key(LsmBloomRustBuilder* b, const char* key, size_t len);
void lsm_bloom_rdb_builder_add_key_and_alt(LsmBloomRustBuilder* b, const char* key,
                                           size_t key_len, const char* alt, size_t alt_len);
size_t lsm_bloom_rdb_builder_entries(const LsmBloomRustBuilder* b);
bool lsm_bloom_rdb_builder_finish(LsmBloomRustBuilder* b, const uint8_t** data, size_t* len);
size_t lsm_bloom_rdb_builder_space(const LsmBloomRustBuilder* b, size_t n);
size_t lsm_bloom_rdb_builder_entries_for(const LsmBloomRustBuilder* b, size_t bytes);
double lsm_bloom_rdb_builder_fp_rate(const LsmBloomRustBuilder* b, size_t n, size_t bytes);
void lsm_bloom_rdb_builder_free(LsmBloomRustBuilder* b);

// What a reader keeps inline for its probes (Rust's InlineProbe, src/rocksdb/ffi/reader.rs):
// filled by lsm_bloom_rdb_reader_new, opaque here. All zero: every key may match.
struct LsmBloomProbe {
  const uint8_t* bits;
  size_t len;
  uint64_t seed;
  uint64_t units;
  uint32_t k;
  uint32_t kind;
};

LsmBloomRustReader* lsm_bloom_rdb_reader_new(const LsmBloomRustPolicy* p, const uint8_t* data,
                                             size_t len, LsmBloomProbe* probe);
bool lsm_bloom_rdb_probe(const LsmBloomProbe* probe, const char* key, size_t len);
void lsm_bloom_rdb_probe_batch(const LsmBloomProbe* probe, size_t n, const LsmBloomKey* keys,
                               bool* out);
void lsm_bloom_rdb_reader_free(LsmBloomRustReader* r);

// shim_public.cc: registers the "lsm_bloom." factory with RocksDB's object library. 0 on
// success; 1 out of memory, 2 another C++ exception (none ever escapes into Rust).
int32_t lsm_bloom_shim_register();
// shim_public.cc, for the tests: the same guard over a function throwing nothing (kind 0),
// std::bad_alloc (1) or std::runtime_error (2); returns what the guard returns.
int32_t lsm_bloom_shim_guard_selftest(int32_t kind);

}  // extern "C"

namespace ROCKSDB_NAMESPACE {
class FilterPolicy;
}

// shim_internal.cc: the FilterPolicy serving lsm-bloom filter blocks; takes ownership of `p`.
const ROCKSDB_NAMESPACE::FilterPolicy* lsm_bloom_shim_new_filter_policy(
    const std::string& id, LsmBloomRustPolicy* p);
