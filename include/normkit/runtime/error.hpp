// normkit runtime: the one error type and its thin check macros.
//
// Every failure inside the library becomes a normkit::Error carrying the source
// location; library code never calls exit()/abort(). Driver and NVRTC failures
// carry the API's own error string, and NVRTC failures the full program log,
// because a compile error without the log is useless to whoever reads it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace normkit {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message + " [" + project_relative(file) + ":" + std::to_string(line) + "]"),
        message_(message), file_(file), line_(line) {}
  // The message without the location suffix (for front ends that add their own).
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  // "src/runtime/x.cpp" rather than the build machine's absolute path.
  static std::string project_relative(const char* file) {
    const std::string path(file);
    for (const char* root : {"/src/", "/include/", "/tests/"})
      if (auto pos = path.rfind(root); pos != std::string::npos) return path.substr(pos + 1);
    return path;
  }
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

}  // namespace normkit

#define NK_THROW(...) throw ::normkit::Error(::normkit::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

// NK_CHECK(cond, message parts...): throws normkit::Error when cond is false.
#define NK_CHECK(cond, ...)      \
  do {                           \
    if (!(cond)) NK_THROW(__VA_ARGS__); \
  } while (0)
