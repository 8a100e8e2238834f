#include "runner/host_workspace.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "motor/unique_fd.hpp"

namespace motor::runner {
namespace {

Error bad(std::string message) { return make_error("bad_request", std::move(message)); }

// Relative, no "..", no NUL; "." and empty components dropped. Empty result: the tree's root.
Expected<std::string> normalize(std::string_view path, std::string_view what) {
  if (path.find('\0') != std::string_view::npos) return bad(std::string(what) + " holds a NUL byte");
  if (!path.empty() && path.front() == '/') return bad(std::string(what) + " must be relative to bb_build_directory");
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part == "..") return bad(std::string(what) + " may not hold a \"..\" component");
    if (!part.empty() && part != ".") {
      if (!out.empty()) out += '/';
      out += part;
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

Expected<std::optional<HostWorkspaceRequest>> parse_host_workspace(simdjson::dom::parser& parser,
                                                                    std::string_view params_json, bool privileged,
                                                                    const std::string& build_directory) {
  simdjson::dom::element root, field;
  if (parser.parse(params_json.data(), params_json.size()).get(root)) return bad("params are not valid JSON");
  if (root.at_key("host_workspace").get(field)) return std::optional<HostWorkspaceRequest>{};
  if (field.is_null()) return std::optional<HostWorkspaceRequest>{};
  if (!privileged) {
    return make_error("unauthorized", "only root and the runner's own account may name a host directory (host_workspace)");
  }
  if (build_directory.empty()) return bad("host_workspace needs bb_build_directory in the runner's config");
  simdjson::dom::object obj;
  if (field.get_object().get(obj)) return bad("field \"params.host_workspace\" must be an object");
  HostWorkspaceRequest request;
  for (auto [key, name] : {std::pair{"input_root", &request.input_root}, std::pair{"tmp", &request.tmp}}) {
    std::string_view text;
    simdjson::dom::element value;
    if (obj.at_key(key).get(value)) continue;
    if (value.get_string().get(text)) return bad(std::string("field \"params.host_workspace.") + key + "\" must be a string");
    auto norm = normalize(text, std::string("host_workspace.") + key);
    if (!norm) return norm.error();
    *name = std::move(*norm);
  }
  if (request.input_root.empty()) return bad("field \"params.host_workspace.input_root\" must name a directory below bb_build_directory");
  return std::optional<HostWorkspaceRequest>{std::move(request)};
}

Expected<std::string> resolve_host_dir(const std::string& build_directory, const std::string& relative) {
  UniqueFd base(open(build_directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!base) return make_error("workspace_setup_failed", "bb_build_directory " + build_directory + ": " + std::strerror(errno));
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(syscall(SYS_openat2, base.get(), relative.c_str(), &how, sizeof how));
  if (fd < 0) {
    const int err = errno;
    const char* why = err == ELOOP ? "a component is a symlink" : err == EXDEV ? "it leaves the build directory" : std::strerror(err);
    return make_error("workspace_setup_failed", "host directory \"" + relative + "\" in the build directory: " + why);
  }
  UniqueFd dir(fd);
  return build_directory + "/" + relative;
}

Status use_host_tmp(sandbox::SandboxConfig& box, const std::string& build_directory, const HostWorkspaceRequest& request) {
  if (request.tmp.empty()) return {};
  auto tmp = resolve_host_dir(build_directory, request.tmp);
  if (!tmp) return tmp.error();
  box.tmp_source = std::move(*tmp);
  return {};
}

std::vector<std::string> hermetic_env(const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  for (const auto& [name, value] : env) {
    if (name.empty() || name.find_first_of(std::string_view("=\0", 2)) != std::string::npos) continue;
    if (value.find('\0') != std::string::npos) continue;
    out.push_back(name + "=" + value);
  }
  return out;
}

}  // namespace motor::runner
