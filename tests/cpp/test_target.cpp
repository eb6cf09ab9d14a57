// Target resolution with injected capabilities and NVRTC support lists.
#include <gtest/gtest.h>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/target.hpp"

using normkit::Error;
using normkit::rt::resolve_target;
using normkit::rt::Target;
using normkit::rt::ToolchainInfo;

namespace {
ToolchainInfo nvrtc13(int driver = 13000) {
  return {13, 0, {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121}, driver};
}
ToolchainInfo nvrtc12_4(int driver = 12040) { return {12, 4, {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90}, driver}; }
}  // namespace

TEST(Target, ExactCubinPerCapability) {
  EXPECT_EQ(resolve_target(9, 0, nvrtc13()).str(), "sm_90a");
  EXPECT_EQ(resolve_target(8, 0, nvrtc13()).str(), "sm_80");
  EXPECT_EQ(resolve_target(8, 6, nvrtc13()).str(), "sm_86");
  EXPECT_EQ(resolve_target(8, 9, nvrtc13()).str(), "sm_89");
  EXPECT_EQ(resolve_target(10, 0, nvrtc13()).str(), "sm_100a");
  EXPECT_EQ(resolve_target(12, 0, nvrtc13()).str(), "sm_120a");
  EXPECT_EQ(resolve_target(7, 5, nvrtc13()).str(), "sm_75");
}

TEST(Target, PtxOnlyWhenNvrtcIsOlderThanTheDevice) {
  // NVRTC 12.4 knows nothing past sm_90: a Blackwell device gets compute_90 PTX, without "a".
  const Target t = resolve_target(10, 0, nvrtc12_4(13000));
  EXPECT_TRUE(t.ptx);
  EXPECT_FALSE(t.arch_specific);
  EXPECT_EQ(t.str(), "compute_90");
  EXPECT_EQ(resolve_target(12, 0, nvrtc12_4(13000)).str(), "compute_90");
  // An arch the list skips (but older than its newest) also gets the newest PTX below it.
  EXPECT_EQ(resolve_target(7, 3, nvrtc12_4()).str(), "compute_72");
}

TEST(Target, DeviceOlderThanNvrtcSupportIsAnError) {
  try {
    resolve_target(7, 0, nvrtc13());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("older than every target"), std::string::npos) << e.what();
  }
}

TEST(Target, PtxNewerThanDriverIsAnError) {
  ToolchainInfo tools = {13, 0, {75, 80, 90}, 12080};
  EXPECT_THROW(resolve_target(10, 0, tools), Error);
  tools.driver_version = 0;  // compile-only: no driver to check
  EXPECT_EQ(resolve_target(10, 0, tools).str(), "compute_90");
  // Cubins do not depend on the driver's PTX support.
  tools.driver_version = 12080;
  EXPECT_EQ(resolve_target(9, 0, tools).str(), "sm_90a");
}

TEST(Target, UnorderedArchListIsHandled) {
  ToolchainInfo tools = {13, 0, {120, 90, 80, 75}, 13000};
  EXPECT_EQ(resolve_target(10, 0, tools).str(), "compute_90");
  EXPECT_EQ(resolve_target(9, 0, tools).str(), "sm_90a");
}

TEST(Target, ParseRoundTrips) {
  for (const char* s : {"sm_90a", "sm_80", "sm_100a", "compute_90", "sm_120a", "sm_86"})
    EXPECT_EQ(Target::parse(s).str(), s);
  EXPECT_EQ(Target::parse("9.0").str(), "sm_90a");
  EXPECT_EQ(Target::parse("8.0").str(), "sm_80");
  EXPECT_EQ(Target::parse("90a").str(), "sm_90a");
  for (const char* bad : {"", "sm90", "sm_9", "compute_90a", "hopper", "sm_90b", "sm_40"})
    EXPECT_THROW(Target::parse(bad), Error) << bad;
}

TEST(Target, EmptyTargetHasNoString) { EXPECT_THROW(Target{}.str(), Error); }
