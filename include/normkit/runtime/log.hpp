// Logging under NORMKIT_LOG (error|warn|info|debug; default warn). Messages go to
// stderr with a "[normkit]" prefix. warn_once() exists because degraded modes
// (read-only cache, PTX fallback) must be reported exactly once per process.
#pragma once

#include <string>

namespace normkit::rt {

enum class LogLevel { off = 0, error = 1, warn = 2, info = 3, debug = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);  // overrides NORMKIT_LOG (tests, front ends)
void reload_log_level();             // re-reads NORMKIT_LOG (Runtime::reload_config)
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);
// Logs at warn level the first time `tag` is seen in this process; returns true if it logged.
bool warn_once(const std::string& tag, const std::string& message);

}  // namespace normkit::rt
