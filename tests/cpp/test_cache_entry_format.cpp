// Disk cache entry format at the byte level: the documented layout, what
// serialize() refuses, the problem deserialize() names for each kind of damage,
// and that every single-bit flip and every truncation is caught (in memory, and
// as a file that load() rejects and store() repairs). No GPU or NVRTC involved.
//
// Split from test_disk_cache.cpp (filesystem behaviour, degradation, processes,
// locks) along the same line as the sources: cache_entry_format.cpp vs
// disk_cache.cpp. Both files share the DiskCacheTest fixture and helpers in
// disk_cache_test_helpers.hpp, so every test keeps its DiskCacheTest.* name.
#include "normkit/runtime/disk_cache.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "disk_cache_test_helpers.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/hash.hpp"

namespace {

using namespace nktest::disk;

// The problem deserialize() reports, or "" when it accepts the bytes.
std::string problem_of(const std::vector<char>& bytes, const std::string& key) {
  try {
    DiskCache::deserialize(bytes, key);
    return "";
  } catch (const normkit::Error& e) {
    return e.message();
  }
}

void put_le(std::vector<char>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Builds an entry by hand with a correct checksum, so that deserialize gets past
// the framing and checksum checks and the field checks are what is exercised.
std::vector<char> raw_entry(const std::string& header, const std::vector<char>& binary, std::uint32_t version = 1) {
  std::vector<char> out = {'N', 'K', 'C', 'A', 'C', 'H', 'E', '1'};
  put_le(out, version, 4);
  put_le(out, header.size(), 8);
  out.insert(out.end(), header.begin(), header.end());
  put_le(out, binary.size(), 8);
  out.insert(out.end(), binary.begin(), binary.end());
  const auto digest = normkit::rt::sha256(out.data(), out.size());
  out.insert(out.end(), digest.begin(), digest.end());
  return out;
}

// --- serialize and deserialize in memory ----------------------------------

TEST_F(DiskCacheTest, SerializeLayoutMatchesTheDocumentedFormat) {
  const CompiledKernel k = make_kernel("layout", 100);
  const std::vector<char> bytes = DiskCache::serialize(k);
  ASSERT_GT(bytes.size(), kPrefixSize + 8 + kChecksumSize);
  EXPECT_EQ(std::string(bytes.data(), 8), "NKCACHE1");
  EXPECT_EQ(bytes[8], 1);
  EXPECT_EQ(bytes[9], 0);
  EXPECT_EQ(bytes[10], 0);
  EXPECT_EQ(bytes[11], 0);
  const std::uint64_t hlen = header_length(bytes);
  const std::string header(bytes.data() + kPrefixSize, hlen);
  EXPECT_EQ(header.rfind("key=" + k.key + "\n", 0), 0u) << header;
  for (const char* line : {"target=sm_90a\n", "lowered_name=_Z4axpyIfLi4EEvPfPKfS2_i\n", "registers=40\n",
                           "spill_store_bytes=8\n", "spill_load_bytes=12\n", "stack_frame_bytes=24\n",
                           "family=selftest_axpy\n", "nvrtc=12.8\n"})
    EXPECT_NE(header.find(line), std::string::npos) << line;
  std::uint64_t blen = 0;
  for (int i = 7; i >= 0; --i) blen = (blen << 8) | static_cast<unsigned char>(bytes[kPrefixSize + hlen + i]);
  EXPECT_EQ(blen, 100u);
  EXPECT_EQ(bytes.size(), kPrefixSize + hlen + 8 + blen + kChecksumSize);
  const auto digest = normkit::rt::sha256(bytes.data(), bytes.size() - kChecksumSize);
  EXPECT_EQ(std::memcmp(digest.data(), bytes.data() + bytes.size() - kChecksumSize, kChecksumSize), 0);
}

TEST_F(DiskCacheTest, SerializeRefusesKernelsItCouldNotReadBack) {
  CompiledKernel k = make_kernel("refuse");
  k.meta["registers"] = "7";  // would shadow the real field
  EXPECT_THROW(DiskCache::serialize(k), normkit::Error);
  k = make_kernel("refuse");
  k.meta["a=b"] = "x";
  EXPECT_THROW(DiskCache::serialize(k), normkit::Error);
  k = make_kernel("refuse");
  k.binary.clear();
  EXPECT_THROW(DiskCache::serialize(k), normkit::Error);
  k = make_kernel("refuse");
  k.lowered_name.clear();
  EXPECT_THROW(DiskCache::serialize(k), normkit::Error);
}

TEST_F(DiskCacheTest, DeserializeNamesTheFirstProblem) {
  const CompiledKernel k = make_kernel("problems", 256);
  const std::vector<char> good = DiskCache::serialize(k);
  ASSERT_EQ(problem_of(good, k.key), "");
  EXPECT_EQ(problem_of(good, ""), "");  // no expected key: any well-formed entry

  const auto expect_problem = [&](std::vector<char> bytes, const std::string& key, const std::string& needle) {
    const std::string problem = problem_of(bytes, key);
    EXPECT_NE(problem.find(needle), std::string::npos) << "wanted '" << needle << "', got '" << problem << "'";
  };
  expect_problem({}, k.key, "too short");
  expect_problem(std::vector<char>(good.begin(), good.begin() + 40), k.key, "too short");

  auto bytes = good;
  bytes[0] = 'X';
  expect_problem(bytes, k.key, "magic");

  bytes = good;
  bytes[8] = 2;
  reseal(bytes);
  expect_problem(bytes, k.key, "version 2");

  bytes = good;
  bytes[12 + 7] = 0x10;  // header length far beyond the file
  expect_problem(bytes, k.key, "header length");

  bytes = good;
  bytes[kPrefixSize + header_length(good)] += 1;  // binary length one past the end
  expect_problem(bytes, k.key, "binary length");

  bytes = good;
  bytes.push_back(0);
  expect_problem(bytes, k.key, "stray bytes");

  bytes = good;
  bytes[good.size() - kChecksumSize - 1] ^= 1;
  expect_problem(bytes, k.key, "checksum");

  expect_problem(good, key_for("someone else"), "key mismatch");

  // Field problems behind a valid checksum.
  const std::string common = "target=sm_90a\nlowered_name=f\nregisters=1\nspill_store_bytes=0\n"
                             "spill_load_bytes=0\nstack_frame_bytes=0\nptxas_log=\n";
  const std::vector<char> bin = {1, 2, 3};
  const std::string key_line = "key=" + k.key + "\n";
  EXPECT_EQ(problem_of(raw_entry(key_line + common, bin), k.key), "");
  expect_problem(raw_entry(key_line + common, bin, 7), k.key, "version 7");
  expect_problem(raw_entry(common + key_line, bin), k.key, "first field");
  expect_problem(raw_entry("key=ABC\n" + common, bin), "", "bad field 'key'");
  expect_problem(raw_entry(key_line + common + "registers=2\n", bin), k.key, "twice");
  expect_problem(raw_entry(key_line + "target=sm_90a\n", bin), k.key, "missing field");
  expect_problem(raw_entry(key_line + common + "no equals sign\n", bin), k.key, "name=value");
  expect_problem(raw_entry(key_line + common.substr(0, common.size() - 1), bin), k.key, "newline-terminated");
  expect_problem(raw_entry(key_line + common + "x=bad \\q escape\n", bin), k.key, "escape");
  expect_problem(raw_entry(key_line + common, {}), k.key, "empty binary");
  std::string h = key_line + common;
  h.replace(h.find("registers=1"), 11, "registers=x1");
  expect_problem(raw_entry(h, bin), k.key, "'registers'");
  h = key_line + common;
  h.replace(h.find("target=sm_90a"), 13, "target=gfx90a");
  expect_problem(raw_entry(h, bin), k.key, "'target'");
}

TEST_F(DiskCacheTest, DeserializeDetectsEverySingleBitFlip) {
  const CompiledKernel k = make_kernel("bits", 200);
  const std::vector<char> good = DiskCache::serialize(k);
  std::vector<char> bytes = good;
  std::size_t accepted = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] ^= static_cast<char>(1 << bit);
      if (problem_of(bytes, k.key).empty()) {
        ++accepted;
        ADD_FAILURE() << "flip of bit " << bit << " of byte " << i << " went unnoticed";
      }
      bytes[i] = good[i];
    }
  }
  EXPECT_EQ(accepted, 0u);
}

// --- damaged entries on disk -----------------------------------------------

TEST_F(DiskCacheTest, TruncatedEntriesAreInvalidAndRepairedByStore) {
  DiskCache cache(root_);
  const CompiledKernel k = make_kernel("truncate");
  ASSERT_TRUE(cache.store(k));
  const std::vector<char> good = read_bytes(cache.entry_path(k.key));
  const std::size_t hlen = header_length(good);
  const std::size_t size = good.size();
  const std::vector<std::size_t> cuts = {1,
                                         7,
                                         8,
                                         12,
                                         19,
                                         kPrefixSize,
                                         kPrefixSize + hlen / 2,  // mid-header
                                         kPrefixSize + hlen,
                                         kPrefixSize + hlen + 4,  // mid binary length
                                         kPrefixSize + hlen + 8 + 1000,  // mid-binary
                                         size - kChecksumSize,
                                         size - kChecksumSize / 2,  // mid-checksum
                                         size - 1};
  for (const std::size_t cut : cuts)
    expect_invalid_then_repaired(cache, k, std::vector<char>(good.begin(), good.begin() + cut),
                                 "truncated to " + std::to_string(cut) + " of " + std::to_string(size));
}

TEST_F(DiskCacheTest, ZeroLengthEntryIsInvalidAndRepairedByStore) {
  DiskCache cache(root_);
  const CompiledKernel k = make_kernel("zero");
  ASSERT_TRUE(cache.store(k));
  expect_invalid_then_repaired(cache, k, {}, "zero-length file");
}

TEST_F(DiskCacheTest, BitFlippedEntriesAreInvalidAndRepairedByStore) {
  DiskCache cache(root_);
  const CompiledKernel k = make_kernel("flip");
  ASSERT_TRUE(cache.store(k));
  const fs::path path = cache.entry_path(k.key);
  const std::vector<char> good = read_bytes(path);
  const std::size_t binary_begin = kPrefixSize + header_length(good) + 8;
  // Every byte of the framing and header, a stride through the binary, the whole checksum.
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < binary_begin; ++i) positions.push_back(i);
  for (std::size_t i = binary_begin; i < good.size() - kChecksumSize; i += 61) positions.push_back(i);
  for (std::size_t i = good.size() - kChecksumSize; i < good.size(); ++i) positions.push_back(i);

  std::size_t n = 0;
  for (const std::size_t pos : positions) {
    std::vector<char> bytes = good;
    bytes[pos] ^= static_cast<char>(1 << (pos % 8));
    const std::string what = "bit " + std::to_string(pos % 8) + " of byte " + std::to_string(pos);
    // A store after each would cost an fsync apiece; repair now and then, and at the end.
    if (++n % 64 == 0 || pos == positions.back()) {
      expect_invalid_then_repaired(cache, k, bytes, what);
      continue;
    }
    write_bytes(path, bytes);
    DiskLookup outcome = DiskLookup::hit;
    EXPECT_FALSE(cache.load(k.key, &outcome).has_value()) << what;
    EXPECT_EQ(outcome, DiskLookup::invalid) << what;
  }
  EXPECT_GT(n, 100u);
}

TEST_F(DiskCacheTest, WrongMagicOrVersionIsInvalidAndRepairedByStore) {
  DiskCache cache(root_);
  const CompiledKernel k = make_kernel("magic");
  ASSERT_TRUE(cache.store(k));
  const std::vector<char> good = read_bytes(cache.entry_path(k.key));

  std::vector<char> bytes = good;
  std::memcpy(bytes.data(), "NKCACHE2", 8);
  reseal(bytes);  // so that only the magic is wrong
  expect_invalid_then_repaired(cache, k, bytes, "wrong magic");

  std::vector<char> text(good.size(), 'x');  // e.g. some other tool's file under our name
  expect_invalid_then_repaired(cache, k, text, "not an entry at all");

  bytes = good;
  bytes[8] = 2;  // a future format with an intact checksum
  reseal(bytes);
  expect_invalid_then_repaired(cache, k, bytes, "format version 2");
  bytes = good;
  bytes[8] = 0;
  reseal(bytes);
  expect_invalid_then_repaired(cache, k, bytes, "format version 0");
}

}  // namespace
