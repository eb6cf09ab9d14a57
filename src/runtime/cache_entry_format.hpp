// Disk cache entry format (byte layout: see disk_cache.hpp). Internal to the runtime.
//
// Why this header exists: the entry format is pure bytes <-> CompiledKernel and
// knows nothing of files, so it lives in cache_entry_format.cpp, apart from the
// filesystem code in disk_cache.cpp. This header exposes only what that
// filesystem code needs: key validation (keys become file names), the full decode
// (load, verified listing), and the framing pieces the cheap listing uses to check
// an entry from its prefix and header alone, without reading the binary.
// Everything else (magic, checksum, escaping, field names) stays private to the .cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normkit/runtime/kernel.hpp"

namespace normkit::rt::entry_format {

// Bytes before the header text: magic, u32 format version, u64 header length.
inline constexpr std::size_t kPrefixSize = 8 + 4 + 8;

// Header fields in file order (the key comes first).
using Fields = std::vector<std::pair<std::string, std::string>>;

// 64 lowercase hex digits: the only keys that may become file names.
bool is_valid_key(std::string_view key);

// Little-endian u64 at p (the on-disk byte order of every length field).
std::uint64_t get_u64(const char* p);

// Parses "name=value\n" lines, unescaping values. Throws Error on the first problem.
Fields parse_header(std::string_view header);

// Framing checks shared by the full decode and the cheap listing, which reads only
// pieces of the file. `total` is the whole entry size; it is checked before
// `prefix` (kPrefixSize bytes) is looked at, so a short buffer is never read past
// its end. Returns the header length. Throws Error.
std::uint64_t check_prefix(const char* prefix, std::uint64_t total);
// Throws Error unless the binary exactly fills what the header leaves of `total`.
void check_binary_length(std::uint64_t header_len, std::uint64_t binary_len, std::uint64_t total);

// Full validation (framing, checksum, header, key); `fields_out` receives the
// header for listings. An empty expected_key skips the file-name comparison.
// Throws Error describing the first problem found.
CompiledKernel decode(const std::vector<char>& bytes, const std::string& expected_key, Fields* fields_out);

}  // namespace normkit::rt::entry_format
