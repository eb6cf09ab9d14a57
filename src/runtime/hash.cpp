// SHA-256 through OpenSSL's EVP interface (libcrypto), the one hashing library
// present on both the development and the GPU machines.
#include "normkit/runtime/hash.hpp"

#include <openssl/evp.h>

#include <cstdint>

#include "normkit/runtime/error.hpp"

namespace normkit::rt {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  NK_CHECK(ctx_ != nullptr, "EVP_MD_CTX_new failed");
  NK_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1,
           "EVP_DigestInit_ex(sha256) failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

Sha256& Sha256::update(const void* data, std::size_t size) {
  NK_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size) == 1, "EVP_DigestUpdate failed");
  return *this;
}

Sha256& Sha256::add_field(std::string_view tag, std::string_view value) {
  // Length prefixes make the encoding injective: no two field lists hash the same bytes.
  const std::uint64_t lengths[2] = {tag.size(), value.size()};
  update(lengths, sizeof(lengths));
  update(tag);
  return update(value);
}

Digest Sha256::finish() {
  Digest out{};
  unsigned int len = 0;
  NK_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len) == 1 && len == out.size(),
           "EVP_DigestFinal_ex failed");
  return out;
}

Digest sha256(const void* data, std::size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.finish();
}

std::string to_hex(const Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s(d.size() * 2, '0');
  for (std::size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = digits[d[i] >> 4];
    s[2 * i + 1] = digits[d[i] & 15];
  }
  return s;
}

}  // namespace normkit::rt
