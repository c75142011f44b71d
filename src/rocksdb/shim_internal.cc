// lsm-bloom's filter blocks as a RocksDB filter policy. This file adapts RocksDB's
// FilterBitsBuilder / FilterBitsReader — internal classes since RocksDB 7.0, declared in
// table/block_based/filter_policy_internal.h of the bundled RocksDB 11.8.1 — to the Rust
// functions of src/rocksdb/ffi/, which do all the filter work. Nothing here allocates or
// locks on a probe; the batch probe passes keys to Rust in fixed-size stack chunks.
//
// RocksDB stores the bytes Finish returns as one filter block under the metaindex key
// "fullfilter." + CompatibilityName() = "fullfilter.lsm_bloom" (FORMAT.md §5), adds its own
// block trailer, and keeps the bytes alive for as long as the reader it got for them.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "rocksdb/filter_policy.h"
#include "shim.h"
#include "table/block_based/filter_policy_internal.h"

namespace {

using ROCKSDB_NAMESPACE::FilterBitsBuilder;
using ROCKSDB_NAMESPACE::FilterBitsReader;
using ROCKSDB_NAMESPACE::FilterBuildingContext;
using ROCKSDB_NAMESPACE::FilterPolicy;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::Status;

// The name every lsm-bloom policy shares, so each can read the others' blocks (a block
// records its own kind and parameters).
constexpr const char* kCompatibilityName = "lsm_bloom";

class Builder : public FilterBitsBuilder {
 public:
  explicit Builder(LsmBloomRustBuilder* b) : b_(b) {}
  ~Builder() override { lsm_bloom_rdb_builder_free(b_); }
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  void AddKey(const Slice& key) override {
    lsm_bloom_rdb_builder_add_key(b_, key.data(), key.size());
  }
  void AddKeyAndAlt(const Slice& key, const Slice& alt) override {
    lsm_bloom_rdb_builder_add_key_and_alt(b_, key.data(), key.size(), alt.data(), alt.size());
  }
  size_t EstimateEntriesAdded() override { return lsm_bloom_rdb_builder_entries(b_); }

  Slice Finish(std::unique_ptr<const char[]>* buf) override { return Finish(buf, nullptr); }
  Slice Finish(std::unique_ptr<const char[]>* buf, Status* status) override {
    const uint8_t* data = nullptr;
    size_t len = 0;
    if (!lsm_bloom_rdb_builder_finish(b_, &data, &len)) {
      if (status != nullptr) {
        *status = Status::Corruption("lsm-bloom: building the filter block failed");
      }
      buf->reset();
      return Slice();
    }
    // RocksDB releases the buffer with delete[].
    char* copy = new char[len];
    std::memcpy(copy, data, len);
    buf->reset(copy);
    if (status != nullptr) {
      *status = Status::OK();
    }
    return Slice(copy, len);
  }
  size_t ApproximateNumEntries(size_t bytes) override {
    return lsm_bloom_rdb_builder_entries_for(b_, bytes);
  }
  size_t CalculateSpace(size_t num_entries) override {
    return lsm_bloom_rdb_builder_space(b_, num_entries);
  }
  double EstimatedFpRate(size_t num_entries, size_t bytes) override {
    return lsm_bloom_rdb_builder_fp_rate(b_, num_entries, bytes);
  }

 private:
  LsmBloomRustBuilder* b_;
};

class Reader : public FilterBitsReader {
 public:
  // Takes the Rust reader and fills `probe_` (left all zero, "every key may match", if Rust
  // could not allocate the reader).
  Reader(const LsmBloomRustPolicy* p, const Slice& contents) {
    r_ = lsm_bloom_rdb_reader_new(p, reinterpret_cast<const uint8_t*>(contents.data()),
                                  contents.size(), &probe_);
  }
  ~Reader() override { lsm_bloom_rdb_reader_free(r_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool MayMatch(const Slice& entry) override {
    return lsm_bloom_rdb_probe(&probe_, entry.data(), entry.size());
  }
  void MayMatch(int num_keys, Slice** keys, bool* may_match) override {
    constexpr int kChunk = 32;
    LsmBloomKey chunk[kChunk];
    for (int start = 0; start < num_keys; start += kChunk) {
      int n = std::min(kChunk, num_keys - start);
      for (int i = 0; i < n; ++i) {
        chunk[i].data = keys[start + i]->data();
        chunk[i].len = keys[start + i]->size();
      }
      lsm_bloom_rdb_probe_batch(&probe_, n, chunk, may_match + start);
    }
  }

 private:
  // Next to the vtable pointer: a probe reads this object's first cache line and then the
  // filter line, nothing else.
  LsmBloomProbe probe_{};
  LsmBloomRustReader* r_ = nullptr;
};

class Policy : public FilterPolicy {
 public:
  Policy(std::string id, LsmBloomRustPolicy* p) : id_(std::move(id)), p_(p) {}
  ~Policy() override { lsm_bloom_rdb_policy_free(p_); }
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  // The full name: RocksDB writes Name() to each table's rocksdb.filter.policy property and
  // GetId() to the OPTIONS file, which parses it back on reopen.
  const char* Name() const override { return id_.c_str(); }
  std::string GetId() const override { return id_; }
  const char* CompatibilityName() const override { return kCompatibilityName; }

  FilterBitsBuilder* GetBuilderWithContext(const FilterBuildingContext& ctx) const override {
    LsmBloomRustBuilder* b = lsm_bloom_rdb_builder_new(
        p_, ctx.level_at_creation, ctx.is_bottommost, ctx.num_levels,
        ctx.compaction_style == ROCKSDB_NAMESPACE::kCompactionStyleLevel);
    return b == nullptr ? nullptr : new Builder(b);
  }
  FilterBitsReader* GetFilterBitsReader(const Slice& contents) const override {
    return new Reader(p_, contents);
  }

 private:
  std::string id_;
  LsmBloomRustPolicy* p_;
};

}  // namespace

const FilterPolicy* lsm_bloom_shim_new_filter_policy(const std::string& id,
                                                     LsmBloomRustPolicy* p) {
  return new Policy(id, p);
}
