// motor-runner's command line as data (cli/command_spec.hpp): the parser, --help per verb,
// motor-runner(8) and the bash completion all come from it.
#pragma once

#include "cli/command_spec.hpp"

namespace motor::runner {

const cli::ProgramSpec& runner_program();

}  // namespace motor::runner
