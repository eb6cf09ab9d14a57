// SHA-256 for cache keys and entry checksums (OpenSSL's libcrypto; no hand-rolled hashing).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace normkit::rt {

using Digest = std::array<std::uint8_t, 32>;

// Incremental hasher. Fields fed with add_field() are length-prefixed so that
// ("ab","c") and ("a","bc") never collide.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  Sha256& add_field(std::string_view tag, std::string_view value);
  Digest finish();

 private:
  void* ctx_;
};

Digest sha256(const void* data, std::size_t size);
inline Digest sha256(std::string_view s) { return sha256(s.data(), s.size()); }
std::string to_hex(const Digest& d);

}  // namespace normkit::rt
