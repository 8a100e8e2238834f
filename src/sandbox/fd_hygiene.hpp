// Nothing of the runner's open files reaches the job: every descriptor above stderr is marked
// close-on-exec just before exec, whatever the runner forgot to mark.
#pragma once

namespace motor::sandbox {

// Child, just before exec.
int close_inherited_fds(const char*& stage);

}  // namespace motor::sandbox
