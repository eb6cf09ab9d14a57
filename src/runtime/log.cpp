#include "normkit/runtime/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace normkit::rt {
namespace {

LogLevel parse_level(const char* text) {
  if (text == nullptr || *text == '\0') return LogLevel::warn;
  const std::string s(text);
  if (s == "off" || s == "0" || s == "none") return LogLevel::off;
  if (s == "error") return LogLevel::error;
  if (s == "warn" || s == "warning") return LogLevel::warn;
  if (s == "info" || s == "1") return LogLevel::info;
  if (s == "debug" || s == "2") return LogLevel::debug;
  std::fprintf(stderr, "[normkit] warning: NORMKIT_LOG=%s is not one of off|error|warn|info|debug; using warn\n", text);
  return LogLevel::warn;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(parse_level(std::getenv("NORMKIT_LOG")))};
  return level;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
    default: return "";
  }
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }
void reload_log_level() { set_log_level(parse_level(std::getenv("NORMKIT_LOG"))); }
bool log_enabled(LogLevel level) { return level != LogLevel::off && level <= log_level(); }

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  // One fprintf per message so lines from concurrent threads do not interleave.
  std::fprintf(stderr, "[normkit] %s: %s\n", level_name(level), message.c_str());
}

bool warn_once(const std::string& tag, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!seen.insert(tag).second) return false;
  }
  log(LogLevel::warn, message);
  return true;
}

}  // namespace normkit::rt
