// The job's network namespace starts with `lo` down and nothing else; bring `lo` up so a build
// can talk to itself (test servers on 127.0.0.1), and nothing more.
#pragma once

namespace motor::sandbox {

// Child: SIOCGIFFLAGS/SIOCSIFFLAGS on a socket in the new network namespace.
int bring_up_loopback(const char*& stage);

}  // namespace motor::sandbox
