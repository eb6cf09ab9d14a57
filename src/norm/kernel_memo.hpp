// Hot-path memo of loaded kernels for the operators: a few integers that fully
// determine the kernel (device, direction, N, dtypes, features, alignment class)
// -> the launch plan and the loaded handle. Building a KernelSource (strings) and
// asking the runtime costs microseconds per call; this lookup costs a hash of a
// few integers under a shared lock. Entries die with the runtime's generation
// (clear_memory_cache / reload_config), so they never outlive the handles' meaning.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "normkit/norm/types.hpp"
#include "normkit/runtime/runtime.hpp"

namespace normkit::norm::detail {

using MemoKey = std::array<std::int64_t, 4>;

struct MemoKeyHash {
  std::size_t operator()(const MemoKey& k) const {
    std::size_t h = 0;
    for (std::int64_t v : k) h = h * 1000003u ^ std::hash<std::int64_t>{}(v);
    return h;
  }
};

template <class Value>
class KernelMemo {
 public:
  std::optional<Value> find(const MemoKey& key) const {
    const std::uint64_t gen = rt::Runtime::instance().generation();
    std::shared_lock lock(mutex_);
    if (gen != generation_) return std::nullopt;
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void put(const MemoKey& key, const Value& value) {
    const std::uint64_t gen = rt::Runtime::instance().generation();
    std::unique_lock lock(mutex_);
    if (gen != generation_) {
      map_.clear();
      generation_ = gen;
    }
    map_[key] = value;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::uint64_t generation_ = 0;
  std::unordered_map<MemoKey, Value, MemoKeyHash> map_;
};

// 4 bits per optional dtype: 0 = absent, 1 + DType otherwise.
inline std::int64_t dtype_code(std::optional<DType> t) { return t ? 1 + static_cast<int>(*t) : 0; }

}  // namespace normkit::norm::detail
