// Runs a function on the loop's next turn, outside the callback that asks for it: for an owner
// that must destroy objects whose callback it is running in. The handle owns itself (a UvHandle
// freed once libuv has closed it).
#pragma once

#include <uv.h>

#include <functional>

#include "motor/expected.hpp"

namespace motor::reactor {

// `fn` runs once, from a zero timer. Fails only if the timer cannot be made or started; `fn`
// has not run then.
Status run_soon(uv_loop_t* loop, std::function<void()> fn);

}  // namespace motor::reactor
