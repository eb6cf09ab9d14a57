// Persistent compile cache, filesystem side: load, store, lock, list, clear.
//
// Design:
// - The entry format (bytes <-> CompiledKernel, framing, header, checksum) lives in
//   cache_entry_format.cpp and never touches a file; this file only moves those
//   bytes to and from disk safely, so each half can be read and tested on its own.
// - Published entries are never modified in place. store() writes a private temp
//   file in the entry directory, fsyncs it and rename()s it over the final name;
//   rename() inside one directory is atomic, so a reader that opens the final name
//   gets one whole inode, old or new. A writer that dies mid-write leaves only a
//   temp file, which no reader looks at and clear() removes.
// - Readers trust nothing: the trailing SHA-256 covers every byte and the key in the
//   header must equal the file name (both checked by entry_format::decode), so a
//   damaged, truncated or misplaced entry is a miss (`invalid`) that the next
//   store() replaces. Bad content never throws.
// - The per-key lock only saves duplicate compiles across processes; correctness
//   never depends on it. Lock files stay in place (clear() aside): unlinking one
//   while another process waits on it would let a third lock a fresh inode.
// - Write-side trouble (read-only, full, not a directory, no permission) turns the
//   object into a no-op after one process-wide warning instead of an error: a
//   broken cache directory must not break a program whose kernels compile fine.
#include "normkit/runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string_view>
#include <system_error>
#include <utility>

#include "cache_entry_format.hpp"
#include "normkit/runtime/cache_key.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/log.hpp"

namespace normkit::rt {

namespace fs = std::filesystem;

namespace {

using entry_format::check_binary_length;
using entry_format::check_prefix;
using entry_format::decode;
using entry_format::Fields;
using entry_format::get_u64;
using entry_format::is_valid_key;
using entry_format::kPrefixSize;
using entry_format::parse_header;

// Small enough that a test hook sees several chunks for a realistic cubin, large
// enough that a multi-megabyte cubin costs few syscalls.
constexpr std::size_t kWriteChunk = 64 * 1024;
// Far above any real cubin; keeps a stray huge *.nkc file from being slurped into memory.
constexpr std::uint64_t kMaxEntrySize = std::uint64_t{1} << 30;
// Only the cheap (unverified) listing reads a header on its own; bound what it will read.
constexpr std::uint64_t kMaxCheapHeader = std::uint64_t{1} << 20;

constexpr std::string_view kEntrySuffix = ".nkc";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kTempMarker = ".nkc.tmp.";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string errno_text(int err) { return std::generic_category().message(err); }

std::string problem_text(const std::exception& e) {
  if (const auto* nk = dynamic_cast<const Error*>(&e)) return nk->message();
  return e.what();
}

// RAII for raw descriptors: every early return in the I/O paths must close.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

int open_retry(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Reads exactly `size` bytes at `offset`; false on error or early end of file.
bool pread_all(int fd, char* out, std::size_t size, off_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

enum class ReadStatus { ok, absent, failed };

ReadStatus read_entry_file(const fs::path& path, std::vector<char>& out, std::string& problem) {
  Fd fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    // ENOTDIR: the cache root lies below a regular file, so no entry can exist.
    if (errno == ENOENT || errno == ENOTDIR) return ReadStatus::absent;
    problem = "cannot open: " + errno_text(errno);
    return ReadStatus::failed;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    problem = "cannot stat: " + errno_text(errno);
    return ReadStatus::failed;
  }
  if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
    return ReadStatus::failed;
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxEntrySize) {
    problem = "implausibly large (" + std::to_string(st.st_size) + " bytes)";
    return ReadStatus::failed;
  }
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      problem = "read failed: " + errno_text(errno);
      return ReadStatus::failed;
    }
    if (n == 0) break;  // shrank under us (truncated in place): decode reports it as short
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return ReadStatus::ok;
}

// Header of an entry without reading (or checksumming) its binary. Throws Error
// with the problem; a readable header says nothing about the binary's integrity.
Fields read_header_only(const fs::path& path) {
  Fd fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  NK_CHECK(fd.get() >= 0, "cannot open: ", errno_text(errno));
  struct stat st {};
  NK_CHECK(::fstat(fd.get(), &st) == 0, "cannot stat: ", errno_text(errno));
  const std::uint64_t total = static_cast<std::uint64_t>(st.st_size);
  char prefix[kPrefixSize] = {};
  NK_CHECK(total < kPrefixSize || pread_all(fd.get(), prefix, sizeof(prefix), 0), "cannot read the entry prefix");
  const std::uint64_t header_len = check_prefix(prefix, total);
  NK_CHECK(header_len <= kMaxCheapHeader, "header length ", header_len, " is implausibly large");
  std::string header(static_cast<std::size_t>(header_len), '\0');
  char len_bytes[8];
  NK_CHECK(pread_all(fd.get(), header.data(), header.size(), kPrefixSize) &&
               pread_all(fd.get(), len_bytes, sizeof(len_bytes), static_cast<off_t>(kPrefixSize + header_len)),
           "cannot read the entry header");
  check_binary_length(header_len, get_u64(len_bytes), total);
  return parse_header(header);
}

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

std::function<void(std::size_t, std::size_t)>& hook_storage() {
  static std::function<void(std::size_t, std::size_t)> hook;
  return hook;
}

// Unique within the process by the counter, across processes by the pid; the clock
// only adds spread so that leftovers from a recycled pid rarely collide (O_EXCL
// catches the rest).
std::string temp_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  const std::uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::uint64_t mix = t ^ (n * 0x9E3779B97F4A7C15ull);
  mix ^= mix >> 31;
  mix *= 0xBF58476D1CE4E5B9ull;
  mix ^= mix >> 29;
  static const char* digits = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i, mix >>= 4) hex[i] = digits[mix & 15];
  return std::to_string(::getpid()) + "." + hex;
}

}  // namespace

DiskCache::DiskCache(std::filesystem::path root) : root_(std::move(root)) {}

std::filesystem::path DiskCache::entry_dir() const { return root_ / ("v" + std::to_string(kCacheFormatVersion)); }

std::filesystem::path DiskCache::entry_path(const std::string& key) const {
  // The key becomes a file name: anything but plain hex could escape the directory.
  NK_CHECK(is_valid_key(key), "invalid cache key '", key, "': expected 64 lowercase hex digits");
  return entry_dir() / (key + std::string(kEntrySuffix));
}

void DiskCache::set_write_hook(std::function<void(std::size_t written, std::size_t total)> hook) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook_storage() = std::move(hook);
}

void DiskCache::degrade(const std::string& why) {
  usable_ = false;
  warn_once("disk-cache-degraded", "disk cache directory " + entry_dir().string() + " is not usable (" + why +
                                       "); compiled kernels are cached in memory only for the rest of this process");
}

std::optional<CompiledKernel> DiskCache::load(const std::string& key, DiskLookup* outcome) const {
  DiskLookup ignored;
  DiskLookup& result = outcome != nullptr ? *outcome : ignored;
  result = DiskLookup::absent;
  const fs::path path = entry_path(key);  // a malformed key is a caller bug and does throw

  std::vector<char> bytes;
  std::string problem;
  switch (read_entry_file(path, bytes, problem)) {
    case ReadStatus::absent:
      return std::nullopt;
    case ReadStatus::failed:
      break;
    case ReadStatus::ok:
      try {
        CompiledKernel k = decode(bytes, key, nullptr);
        result = DiskLookup::hit;
        return k;
      } catch (const std::exception& e) {
        problem = problem_text(e);
      }
      break;
  }
  result = DiskLookup::invalid;
  // Info, not warn: an invalid entry costs one recompile and is then overwritten.
  log(LogLevel::info, "disk cache: ignoring " + path.string() + ": " + problem);
  return std::nullopt;
}

bool DiskCache::store(const CompiledKernel& kernel) {
  if (!usable_) return false;
  const std::vector<char> bytes = serialize(kernel);  // throws only for malformed kernels (caller bugs)
  const fs::path dir = entry_dir();
  const fs::path final_path = entry_path(kernel.key);

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    degrade("cannot create the directory: " + ec.message());
    return false;
  }

  std::function<void(std::size_t, std::size_t)> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    hook = hook_storage();
  }

  fs::path temp_path;
  Fd fd;
  for (int attempt = 0; attempt < 16 && fd.get() < 0; ++attempt) {
    temp_path = dir / (kernel.key + std::string(kTempMarker) + temp_suffix());
    fd = Fd(open_retry(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0 && errno != EEXIST) break;
  }
  if (fd.get() < 0) {
    const int err = errno;
    degrade("cannot create a temporary file: " + errno_text(err));
    return false;
  }

  const auto fail = [&](const std::string& what, int err) {
    fd.reset();
    ::unlink(temp_path.c_str());
    degrade(what + ": " + errno_text(err));
    return false;
  };

  const std::size_t total = bytes.size();
  std::size_t written = 0;
  while (written < total) {
    const std::size_t chunk_end = std::min(total, written + kWriteChunk);
    while (written < chunk_end) {
      const ssize_t n = ::write(fd.get(), bytes.data() + written, chunk_end - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        return fail("cannot write " + temp_path.filename().string(), err);
      }
      written += static_cast<std::size_t>(n);
    }
    if (hook) {
      try {
        hook(written, total);
      } catch (...) {
        fd.reset();  // a throwing test hook must not leave a temp file behind
        ::unlink(temp_path.c_str());
        throw;
      }
    }
  }
  // Without fsync before rename, a crash can publish the name before the data.
  if (::fsync(fd.get()) != 0) {
    const int err = errno;
    return fail("cannot fsync " + temp_path.filename().string(), err);
  }
  if (::close(fd.release()) != 0) {
    const int err = errno;
    return fail("cannot close " + temp_path.filename().string(), err);
  }
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    return fail("cannot rename into " + final_path.filename().string(), err);
  }

  // Makes the rename itself durable; an entry lost to a crash is only a recompile,
  // so a failure here is not worth degrading for.
  Fd dir_fd(open_retry(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
  return true;
}

DiskCache::KeyLock& DiskCache::KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    KeyLock old(fd_);  // releases our current lock, if any, on scope exit
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

DiskCache::KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  // close() alone would release it too; unlocking first is explicit and harmless.
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

DiskCache::KeyLock DiskCache::lock(const std::string& key) {
  fs::path lock_path = entry_path(key);
  lock_path.replace_extension(kLockSuffix);
  if (!usable_) return KeyLock();

  std::error_code ec;
  fs::create_directories(entry_dir(), ec);
  if (ec) {
    degrade("cannot create the directory: " + ec.message());
    return KeyLock();
  }
  Fd fd(open_retry(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int err = errno;
    // flock needs no write access: a lock file someone else created is still usable.
    if (err == EACCES || err == EROFS) fd = Fd(open_retry(lock_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      degrade("cannot create lock file " + lock_path.filename().string() + ": " + errno_text(err));
      return KeyLock();
    }
  }
  int rc;
  do {
    rc = ::flock(fd.get(), LOCK_EX);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    // Some network filesystems refuse flock. Entries stay correct without the lock
    // (atomic rename); processes merely may compile the same kernel concurrently.
    warn_once("disk-cache-nolock", "disk cache: cannot lock " + lock_path.string() + " (" + errno_text(err) +
                                       "); concurrent processes may compile the same kernel twice");
    return KeyLock();
  }
  return KeyLock(fd.release());
}

std::vector<DiskEntryInfo> DiskCache::list(bool verify) const {
  std::vector<DiskEntryInfo> out;
  std::error_code ec;
  fs::directory_iterator it(entry_dir(), ec);
  if (ec) return out;  // no directory yet (or unreadable): nothing to list
  for (const fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    // Temp files ("<key>.nkc.tmp.<pid>.<rand>") and locks do not end in ".nkc".
    if (!ends_with(name, kEntrySuffix)) continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;

    DiskEntryInfo info;
    info.path = it->path();
    info.key = name.substr(0, name.size() - kEntrySuffix.size());
    info.size = it->file_size(type_ec);
    if (type_ec) info.size = 0;
    if (!is_valid_key(info.key)) {
      info.problem = "file name is not a cache key";
      out.push_back(std::move(info));
      continue;
    }

    Fields fields;
    if (verify) {
      std::vector<char> bytes;
      switch (read_entry_file(info.path, bytes, info.problem)) {
        case ReadStatus::absent:
          continue;  // removed since the directory was read
        case ReadStatus::failed:
          break;
        case ReadStatus::ok:
          try {
            decode(bytes, info.key, &fields);
            info.valid = true;
          } catch (const std::exception& e) {
            info.problem = problem_text(e);
          }
          break;
      }
    }
    if (!info.valid) {
      // Without verification this is the whole check: framing and header only, so
      // `valid` means "well-formed", not "checksum verified". After a failed
      // verification it just recovers what meta it can.
      try {
        fields = read_header_only(info.path);
        if (!verify) info.valid = true;
      } catch (const std::exception& e) {
        if (!verify) info.problem = problem_text(e);
      }
    }
    for (auto& [n, v] : fields) info.meta.emplace(std::move(n), std::move(v));
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const DiskEntryInfo& a, const DiskEntryInfo& b) { return a.path < b.path; });
  return out;
}

std::size_t DiskCache::clear() {
  std::error_code ec;
  fs::directory_iterator it(entry_dir(), ec);
  if (ec) return 0;
  // Collect first: removing while iterating leaves readdir's view unspecified.
  std::vector<std::pair<fs::path, bool>> doomed;  // path, is an entry
  for (const fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    const bool entry = ends_with(name, kEntrySuffix);
    if (entry || ends_with(name, kLockSuffix) || name.find(kTempMarker) != std::string::npos)
      doomed.emplace_back(it->path(), entry);
  }
  std::size_t removed = 0;
  for (const auto& [path, entry] : doomed) {
    std::error_code rm_ec;
    if (fs::remove(path, rm_ec)) {
      removed += entry ? 1 : 0;
    } else if (rm_ec) {
      log(LogLevel::warn, "disk cache: cannot remove " + path.string() + ": " + rm_ec.message());
    }
  }
  return removed;
}

}  // namespace normkit::rt
