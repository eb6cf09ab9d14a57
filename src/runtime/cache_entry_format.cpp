// Disk cache entry format: CompiledKernel <-> bytes (layout: see disk_cache.hpp).
//
// Design:
// - Pure bytes in, bytes out: no file is opened here, so every framing, header and
//   checksum rule can be tested on an in-memory vector, and disk_cache.cpp deals
//   only with getting those bytes to and from the filesystem safely. The few
//   pieces that code needs are declared in cache_entry_format.hpp.
// - Self-describing and checksummed: magic and format version first, then a
//   key=value text header (key first, so a misplaced file is caught by name), the
//   binary, and a SHA-256 over every preceding byte. Lengths are fixed-width
//   little-endian so an entry means the same on every host that shares a cache.
// - Readers trust nothing: decode checks framing before touching the body, the
//   checksum before parsing, and names the first problem in the Error it throws;
//   the caller turns that into a miss. serialize() refuses any kernel decode
//   would reject, or such an entry would be silently recompiled forever.
#include "cache_entry_format.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <iterator>
#include <string_view>
#include <system_error>
#include <utility>

#include "normkit/runtime/cache_key.hpp"
#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/hash.hpp"

namespace normkit::rt {

namespace entry_format {

namespace {

constexpr std::string_view kMagic = "NKCACHE1";
// kPrefixSize (magic, format version, header length) is in the header: the cheap listing reads it.
constexpr std::size_t kChecksumSize = 32;
constexpr std::size_t kMinEntrySize = kPrefixSize + 8 + kChecksumSize;

// Header fields that map onto CompiledKernel members; everything else is meta.
constexpr std::string_view kReservedFields[] = {
    "key", "target", "lowered_name", "registers", "spill_store_bytes",
    "spill_load_bytes", "stack_frame_bytes", "ptxas_log"};

bool is_reserved(std::string_view name) {
  return std::find(std::begin(kReservedFields), std::end(kReservedFields), name) != std::end(kReservedFields);
}

// Explicit byte order so an entry means the same on every host that shares a cache.
void put_u32(std::vector<char>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::vector<char>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Header values are one line each; escaping newline (and the escape character
// itself) keeps multi-line values such as the ptxas log exact on round trip.
std::string escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

bool unescape(std::string_view text, std::string& out) {
  out.clear();
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) return false;
    if (text[i] == '\\') {
      out += '\\';
    } else if (text[i] == 'n') {
      out += '\n';
    } else {
      return false;
    }
  }
  return true;
}

int parse_int_field(const Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (n != name) continue;
    int out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    NK_CHECK(ec == std::errc() && end == v.data() + v.size() && out >= -1, "bad field '", name, "': '", v,
             "' is not an integer >= -1");
    return out;
  }
  NK_THROW("bad header: missing field '", name, "'");
}

const std::string& string_field(const Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields)
    if (n == name) return v;
  NK_THROW("bad header: missing field '", name, "'");
}

}  // namespace

bool is_valid_key(std::string_view key) {
  return key.size() == 64 &&
         std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Fields parse_header(std::string_view header) {
  NK_CHECK(!header.empty() && header.back() == '\n', "bad header: empty or not newline-terminated");
  Fields fields;
  std::size_t line_no = 0;
  while (!header.empty()) {
    ++line_no;
    const std::size_t eol = header.find('\n');
    const std::string_view line = header.substr(0, eol);
    header.remove_prefix(eol + 1);
    const std::size_t eq = line.find('=');
    NK_CHECK(eq != std::string_view::npos && eq > 0, "bad header: line ", line_no, " is not name=value");
    std::string name(line.substr(0, eq));
    std::string value;
    NK_CHECK(unescape(line.substr(eq + 1), value), "bad field '", name, "': invalid escape sequence");
    for (const auto& f : fields) NK_CHECK(f.first != name, "bad header: field '", name, "' appears twice");
    fields.emplace_back(std::move(name), std::move(value));
  }
  return fields;
}

// Framing checks shared by the full decode and the cheap listing, which reads only
// pieces of the file. `total` is the whole entry size; it is checked before
// `prefix` is looked at, so a short buffer is never read past its end.
std::uint64_t check_prefix(const char* prefix, std::uint64_t total) {
  NK_CHECK(total >= kMinEntrySize, "entry too short: ", total, " bytes, a valid entry has at least ", kMinEntrySize);
  NK_CHECK(std::string_view(prefix, kMagic.size()) == kMagic, "wrong magic (not a normkit cache entry)");
  const std::uint32_t version = get_u32(prefix + 8);
  NK_CHECK(version == static_cast<std::uint32_t>(kCacheFormatVersion), "unsupported format version ", version,
           " (this build reads version ", kCacheFormatVersion, ")");
  const std::uint64_t header_len = get_u64(prefix + 12);
  NK_CHECK(header_len <= total - kMinEntrySize, "header length ", header_len, " runs past the end of the ", total,
           "-byte entry");
  return header_len;
}

void check_binary_length(std::uint64_t header_len, std::uint64_t binary_len, std::uint64_t total) {
  const std::uint64_t room = total - kMinEntrySize - header_len;
  NK_CHECK(binary_len <= room, "binary length ", binary_len, " runs past the end of the ", total, "-byte entry");
  NK_CHECK(binary_len == room, "entry has ", room - binary_len, " stray bytes after the binary");
}

// Full validation; `fields_out` receives the header for listings.
CompiledKernel decode(const std::vector<char>& bytes, const std::string& expected_key, Fields* fields_out) {
  const std::uint64_t total = bytes.size();
  const std::uint64_t header_len = check_prefix(bytes.data(), total);
  const char* const header_begin = bytes.data() + kPrefixSize;
  const std::uint64_t binary_len = get_u64(header_begin + header_len);
  check_binary_length(header_len, binary_len, total);

  // Checksum before parsing: after it passes, the remaining checks catch writer
  // bugs and misplaced files, not random damage.
  const std::size_t body = total - kChecksumSize;
  const Digest actual = sha256(bytes.data(), body);
  NK_CHECK(std::memcmp(actual.data(), bytes.data() + body, kChecksumSize) == 0, "checksum mismatch");

  Fields fields = parse_header(std::string_view(header_begin, header_len));
  NK_CHECK(fields.front().first == "key", "bad header: first field is '", fields.front().first, "', not 'key'");
  const std::string& key = fields.front().second;
  NK_CHECK(is_valid_key(key), "bad field 'key': '", key, "' is not 64 lowercase hex digits");
  NK_CHECK(expected_key.empty() || key == expected_key, "key mismatch: entry is for ", key, ", expected ",
           expected_key);

  CompiledKernel k;
  k.key = key;
  const std::string& target_text = string_field(fields, "target");
  try {
    k.target = Target::parse(target_text);
  } catch (const std::exception& e) {
    NK_THROW("bad field 'target': '", target_text, "' (", e.what(), ")");
  }
  k.lowered_name = string_field(fields, "lowered_name");
  NK_CHECK(!k.lowered_name.empty(), "bad field 'lowered_name': empty");
  k.registers = parse_int_field(fields, "registers");
  k.spill_store_bytes = parse_int_field(fields, "spill_store_bytes");
  k.spill_load_bytes = parse_int_field(fields, "spill_load_bytes");
  k.stack_frame_bytes = parse_int_field(fields, "stack_frame_bytes");
  k.ptxas_log = string_field(fields, "ptxas_log");
  for (const auto& [n, v] : fields)
    if (!is_reserved(n)) k.meta.emplace(n, v);
  NK_CHECK(binary_len > 0, "bad entry: empty binary");
  const char* const binary_begin = header_begin + header_len + 8;
  k.binary.assign(binary_begin, binary_begin + binary_len);
  if (fields_out != nullptr) *fields_out = std::move(fields);
  return k;
}

}  // namespace entry_format

// The public face of the format, kept on DiskCache for tests and `normkit cache verify`.
using namespace entry_format;

std::vector<char> DiskCache::serialize(const CompiledKernel& kernel) {
  NK_CHECK(is_valid_key(kernel.key), "cannot serialize kernel: invalid cache key '", kernel.key, "'");
  NK_CHECK(!kernel.lowered_name.empty(), "cannot serialize kernel ", kernel.key, ": empty lowered name");
  NK_CHECK(!kernel.binary.empty(), "cannot serialize kernel ", kernel.key, ": empty binary");
  // Refuse here what deserialize would reject, or the entry would be silently recompiled forever.
  const std::string target_text = kernel.target.str();
  bool target_ok = false;
  try {
    target_ok = Target::parse(target_text) == kernel.target;
  } catch (const std::exception&) {
  }
  NK_CHECK(target_ok, "cannot serialize kernel ", kernel.key, ": target '", target_text, "' does not round-trip");

  std::string header;
  const auto add = [&header](std::string_view name, std::string_view value) {
    header.append(name).append("=").append(escape(value)).append("\n");
  };
  add("key", kernel.key);
  add("target", target_text);
  add("lowered_name", kernel.lowered_name);
  add("registers", std::to_string(kernel.registers));
  add("spill_store_bytes", std::to_string(kernel.spill_store_bytes));
  add("spill_load_bytes", std::to_string(kernel.spill_load_bytes));
  add("stack_frame_bytes", std::to_string(kernel.stack_frame_bytes));
  add("ptxas_log", kernel.ptxas_log);
  for (const auto& [name, value] : kernel.meta) {
    NK_CHECK(!name.empty() && name.find_first_of("=\n") == std::string::npos && !is_reserved(name),
             "cannot serialize kernel ", kernel.key, ": meta name '", name,
             "' is empty, contains '=' or a newline, or shadows a built-in field");
    add(name, value);
  }

  std::vector<char> out;
  out.reserve(kMinEntrySize + header.size() + kernel.binary.size());
  // assign() into the empty, reserved vector: the same bytes as insert() at end(), but
  // it keeps GCC 12 from a false -Wstringop-overflow on the push_backs that follow.
  out.assign(kMagic.begin(), kMagic.end());
  put_u32(out, static_cast<std::uint32_t>(kCacheFormatVersion));
  put_u64(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  put_u64(out, kernel.binary.size());
  out.insert(out.end(), kernel.binary.begin(), kernel.binary.end());
  const Digest digest = sha256(out.data(), out.size());
  out.insert(out.end(), digest.begin(), digest.end());
  return out;
}

CompiledKernel DiskCache::deserialize(const std::vector<char>& bytes, const std::string& expected_key) {
  return decode(bytes, expected_key, nullptr);
}

}  // namespace normkit::rt
