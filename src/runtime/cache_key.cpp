#include "normkit/runtime/cache_key.hpp"

#include <algorithm>
#include <regex>
#include <set>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/hash.hpp"

namespace normkit::rt {

std::vector<std::string> normalize_options(std::vector<std::string> options) {
  // Every option the runtime passes is a standalone flag or flag=value, so order
  // carries no meaning; sorting and de-duplicating makes equivalent lists hash alike.
  std::sort(options.begin(), options.end());
  options.erase(std::unique(options.begin(), options.end()), options.end());
  return options;
}

std::vector<std::string> included_headers(const std::string& source,
                                          const std::map<std::string, std::string>& headers) {
  static const std::regex include_line(R"re(^[ \t]*#[ \t]*include[ \t]*"([^"]+)")re", std::regex::multiline);
  std::set<std::string> found;
  std::vector<const std::string*> pending{&source};
  while (!pending.empty()) {
    const std::string* text = pending.back();
    pending.pop_back();
    for (std::sregex_iterator it(text->begin(), text->end(), include_line), end; it != end; ++it) {
      const std::string name = (*it)[1];
      auto h = headers.find(name);
      // An include the registry does not have would fail in NVRTC anyway (no include
      // path is given); it cannot change the binary, so it need not enter the key.
      if (h == headers.end() || !found.insert(name).second) continue;
      pending.push_back(&h->second);
    }
  }
  return {found.begin(), found.end()};
}

std::string compute_cache_key(const KeyInputs& in) {
  NK_CHECK(in.kernel != nullptr, "compute_cache_key: no kernel");
  const std::map<std::string, std::string> registry = in.headers ? *in.headers : device_headers();
  Sha256 h;
  h.add_field("format", std::to_string(in.format_version));
  h.add_field("family", in.kernel->family);
  h.add_field("template_args", in.kernel->template_args);
  h.add_field("entry", in.kernel->entry);
  h.add_field("source", in.kernel->source);
  for (const auto& name : included_headers(in.kernel->source, registry)) {
    h.add_field("header", name);
    h.add_field("header_sha256", to_hex(sha256(registry.at(name))));
  }
  for (const auto& opt : normalize_options(in.options)) h.add_field("option", opt);
  h.add_field("target", in.target.str());
  h.add_field("nvrtc", std::to_string(in.nvrtc_major) + "." + std::to_string(in.nvrtc_minor));
  auto env = in.codegen_env;
  std::sort(env.begin(), env.end());
  for (const auto& [name, value] : env) h.add_field("env:" + name, value);
  return to_hex(h.finish());
}

}  // namespace normkit::rt
