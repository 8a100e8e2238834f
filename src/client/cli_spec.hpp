// The `motor` command line as data (cli/command_spec.hpp): `motor --help`, `motor VERB --help`
// (that verb's options only), motor(1) and the bash completion come from it. An option the
// parser (cli.cpp) takes is listed here once, under each verb that takes it.
#pragma once

#include "cli/command_spec.hpp"

namespace motor::client {

const cli::ProgramSpec& client_program();

}  // namespace motor::client
