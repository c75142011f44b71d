// Registration of lsm-bloom's policies with RocksDB, and the per-level budget over RocksDB's
// own Bloom and Ribbon filters. Public RocksDB headers only: this file builds against any
// RocksDB install's include/ (the lsm-bloom filter blocks need shim_internal.cc as well).
//
// Every name "lsm_bloom.<rest>" goes to one factory, which hands the whole name to Rust
// (src/rocksdb/spec.rs) to parse; a name Rust rejects fails CreateFromString with Rust's
// message.

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

#include "rocksdb/filter_policy.h"
#include "rocksdb/utilities/object_registry.h"
#include "shim.h"

namespace {

using ROCKSDB_NAMESPACE::FilterBitsBuilder;
using ROCKSDB_NAMESPACE::FilterBitsReader;
using ROCKSDB_NAMESPACE::FilterBuildingContext;
using ROCKSDB_NAMESPACE::FilterPolicy;
using ROCKSDB_NAMESPACE::ObjectLibrary;
using ROCKSDB_NAMESPACE::Slice;

// RocksDB's Bloom or Ribbon at the bits/key the budget plans for each new file. Every
// built-in filter carries its own metadata and shares one CompatibilityName, so one built-in
// policy reads them all. A built-in builder may point into the policy that made it
// (optimize_filters_for_memory's rounding balance), so those policies live as long as this
// one: one per distinct bits/key (the plan moves on a 1/16-bit grid, so there are few).
class BuiltinBudgetPolicy : public FilterPolicy {
 public:
  BuiltinBudgetPolicy(std::string id, LsmBloomRustPolicy* p, bool ribbon)
      : id_(std::move(id)), p_(p), ribbon_(ribbon),
        reader_(ROCKSDB_NAMESPACE::NewBloomFilterPolicy(10.0)) {}
  ~BuiltinBudgetPolicy() override { lsm_bloom_rdb_policy_free(p_); }
  BuiltinBudgetPolicy(const BuiltinBudgetPolicy&) = delete;
  BuiltinBudgetPolicy& operator=(const BuiltinBudgetPolicy&) = delete;

  const char* Name() const override { return id_.c_str(); }
  std::string GetId() const override { return id_; }
  const char* CompatibilityName() const override { return reader_->CompatibilityName(); }

  FilterBitsBuilder* GetBuilderWithContext(const FilterBuildingContext& ctx) const override {
    double bits = lsm_bloom_rdb_policy_builtin_bits(
        p_, ctx.level_at_creation, ctx.is_bottommost, ctx.num_levels,
        ctx.compaction_style == ROCKSDB_NAMESPACE::kCompactionStyleLevel);
    return For(bits)->GetBuilderWithContext(ctx);
  }
  FilterBitsReader* GetFilterBitsReader(const Slice& contents) const override {
    return reader_->GetFilterBitsReader(contents);
  }

 private:
  const FilterPolicy* For(double bits) const {
    long millibits = std::lround(bits * 1000.0);
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = by_millibits_[millibits];
    if (!slot) {
      double b = static_cast<double>(millibits) / 1000.0;
      // Ribbon at every level, flushes included (bloom_before_level -1; RocksDB's default
      // of 0 would write flushes with its Bloom filter).
      slot.reset(ribbon_ ? ROCKSDB_NAMESPACE::NewRibbonFilterPolicy(b, -1)
                         : ROCKSDB_NAMESPACE::NewBloomFilterPolicy(b));
    }
    return slot.get();
  }

  std::string id_;
  LsmBloomRustPolicy* p_;
  bool ribbon_;
  std::shared_ptr<const FilterPolicy> reader_;
  mutable std::mutex mu_;
  mutable std::map<long, std::shared_ptr<const FilterPolicy>> by_millibits_;
};

// The factory's work: Rust parses the name and makes the policy.
const FilterPolicy* MakePolicy(const std::string& uri,
                               std::unique_ptr<const FilterPolicy>* guard,
                               std::string* errmsg) {
  char err[512] = {0};
  int32_t family = -1;
  LsmBloomRustPolicy* p =
      lsm_bloom_rdb_policy_new(uri.data(), uri.size(), &family, err, sizeof err);
  if (p == nullptr) {
    if (errmsg != nullptr) {
      *errmsg = err;
    }
    return nullptr;
  }
  switch (family) {
    case kLsmBloomFamilyBuiltinBloom:
    case kLsmBloomFamilyBuiltinRibbon:
      guard->reset(new BuiltinBudgetPolicy(uri, p, family == kLsmBloomFamilyBuiltinRibbon));
      break;
    default:
      guard->reset(lsm_bloom_shim_new_filter_policy(uri, p));
  }
  return guard->get();
}

// Runs f and turns any C++ exception into an error code (0: none, 1: std::bad_alloc,
// 2: anything else): an exception must never unwind into Rust through an extern "C"
// function, where it aborts the process.
template <typename F>
int32_t Guarded(F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const std::bad_alloc&) {
    return 1;
  } catch (...) {
    return 2;
  }
}

}  // namespace

extern "C" int32_t lsm_bloom_shim_register() {
  return Guarded([] {
    ObjectLibrary::Default()->AddFactory<const FilterPolicy>(
        ObjectLibrary::PatternEntry("lsm_bloom", false).AddSeparator(".", true),
        [](const std::string& uri, std::unique_ptr<const FilterPolicy>* guard,
           std::string* errmsg) -> const FilterPolicy* {
          // RocksDB calls this from CreateFromString, which Rust reaches through RocksDB's
          // C API: nothing may throw out of it either.
          const FilterPolicy* made = nullptr;
          int32_t rc = Guarded([&] { made = MakePolicy(uri, guard, errmsg); });
          if (rc != 0 && errmsg != nullptr) {
            Guarded([&] {
              *errmsg = rc == 1 ? "lsm_bloom: out of memory creating the filter policy"
                                : "lsm_bloom: C++ exception creating the filter policy";
            });
          }
          return rc == 0 ? made : nullptr;
        });
  });
}

// For the tests: the guard over a function that throws nothing (kind 0), std::bad_alloc
// (1) or a std::runtime_error (2).
extern "C" int32_t lsm_bloom_shim_guard_selftest(int32_t kind) {
  return Guarded([kind] {
    if (kind == 1) {
      throw std::bad_alloc();
    }
    if (kind == 2) {
      throw std::runtime_error("selftest");
    }
  });
}
