// Persistent compile cache: one self-describing, checksummed file per entry.
//
// Layout: <dir>/v<format>/<key>.nkc, plus <key>.lock for the per-key advisory lock.
// Entry file: "NKCACHE1" magic | u32 format | u64 header length | header text
// (key=value lines, key first) | u64 binary length | binary | 32-byte SHA-256 of all
// preceding bytes. Written to a unique temp file in the same directory, fsync'd,
// then rename()d over the final name, so readers see either nothing or a whole
// entry. Any entry that is short, flipped, zero-length, of the wrong magic or
// version, or whose key differs from its file name is a miss (and is overwritten
// by the next store). If the directory cannot be created or written (read-only,
// full, not a directory) the cache stops writing and locking, with one warning;
// reads go on, so a pre-filled read-only cache (a run-only deployment) still serves.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "normkit/runtime/kernel.hpp"

namespace normkit::rt {

enum class DiskLookup { hit, absent, invalid };

struct DiskEntryInfo {
  std::filesystem::path path;
  std::string key;
  std::uintmax_t size = 0;
  bool valid = false;
  std::string problem;                      // why it is invalid
  std::map<std::string, std::string> meta;  // header fields (when readable)
};

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path entry_dir() const;           // root/v<format>
  std::filesystem::path entry_path(const std::string& key) const;
  bool usable() const { return usable_; }            // false once writes failed: no more stores or locks

  // Reads and validates an entry. Never throws for bad files: they are `invalid`.
  std::optional<CompiledKernel> load(const std::string& key, DiskLookup* outcome = nullptr) const;
  // Atomically publishes an entry. Returns false (after one warning) when the
  // directory is unusable; no store is attempted from then on. Throws for a kernel
  // that could not be read back (bad key, unresolved target, reserved meta name).
  bool store(const CompiledKernel& kernel);

  // Exclusive advisory lock on one key (flock on <key>.lock), held while alive.
  class KeyLock {
   public:
    KeyLock() = default;
    explicit KeyLock(int fd) : fd_(fd) {}
    KeyLock(KeyLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    KeyLock& operator=(KeyLock&& other) noexcept;
    ~KeyLock();
    bool held() const { return fd_ >= 0; }

   private:
    int fd_ = -1;
  };
  // Blocks until the lock is held; returns an unheld lock when the directory is unusable.
  KeyLock lock(const std::string& key);

  // Every *.nkc entry. verify=true checks the checksum (valid = loadable);
  // verify=false reads framing and header only (valid = well-formed). meta holds every header field.
  std::vector<DiskEntryInfo> list(bool verify) const;
  // Removes every entry, lock and leftover temp file; returns the number of entries removed.
  std::size_t clear();

  // Serialization, exposed for tests and `normkit cache verify`.
  static std::vector<char> serialize(const CompiledKernel& kernel);
  // Throws normkit::Error describing the first problem found. An empty
  // expected_key skips the file-name comparison (the key must still be well-formed).
  static CompiledKernel deserialize(const std::vector<char>& bytes, const std::string& expected_key);

  // Test seam: called after `written` of `total` bytes reached the temp file (may kill the process).
  static void set_write_hook(std::function<void(std::size_t written, std::size_t total)> hook);

 private:
  void degrade(const std::string& why);
  std::filesystem::path root_;
  std::atomic<bool> usable_{true};  // read by concurrent callers, cleared by a failing store
};

}  // namespace normkit::rt
