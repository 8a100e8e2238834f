// How anything that outlives a callback refers to a client session.
#pragma once

#include <cstdint>

namespace motor::runner {

// By its id, never by its address: ids are never reused (64 bits, counted up), so a deferred
// reply or a job's follower finds its own session or none, while a freed Session's address can
// be a new connection's, another account's (issue 14.1). Runner::find_session looks one up.
enum class SessionId : uint64_t {};

}  // namespace motor::runner
