// Where `motor` sends its requests: the runner's Unix socket here, or `motor-runner connect` on
// another host through OpenSSH (`--host ssh://[user@]host[:port]`, docs/remote-callers.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::client {

struct SshTarget {
  std::string url;   // as given, for messages ("ssh://motor@build1")
  std::string user;  // "" = ssh's default (its config, else the local name)
  std::string host;
  int port = 0;      // 0 = ssh's default
};

struct Endpoint {
  std::string socket_path;       // used when `ssh` is empty
  std::optional<SshTarget> ssh;
  // "--host URL" or "--socket PATH": how to name this endpoint on a command line.
  std::string as_option() const;
};

// ssh://[user@]host[:port] (an IPv6 address in brackets); anything else is a usage error. Host and
// user never start with '-' and hold no spaces or shell characters, so ssh cannot take them for
// options.
Expected<SshTarget> parse_ssh_url(std::string_view url);

}  // namespace motor::client
