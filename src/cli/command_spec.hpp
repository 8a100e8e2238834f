// A program's command line as data: its verbs, each verb's operands and options with their help.
// From one ProgramSpec come the parser, `--help` (all verbs, or one verb's options only), the
// man page and the bash completion, so adding an option is one entry.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::cli {

struct OptionSpec {
  std::string_view flag;        // "--config"
  std::string_view short_flag;  // "-w", or ""
  std::string_view value;       // "FILE"; "" for a switch
  std::string_view help;
  bool repeatable = false;
};

struct VerbSpec {
  std::string_view name;
  std::string_view operands;     // "[FILE]", "JOB_ID", "[-- COMMAND...]"
  std::string_view summary;      // one line
  std::string_view description;  // paragraphs separated by blank lines
  std::vector<OptionSpec> options;
};

struct ProgramSpec {
  std::string_view name;
  std::string_view section;  // man section: "1", "8"
  std::string_view summary;
  std::string_view description;
  std::string_view exit_status;  // man page EXIT STATUS, one "CODE: meaning" per line
  std::string_view files;        // man page FILES, one "PATH: meaning" per line
  std::string_view see_also;     // "motor-runner(8), motor-runner.conf(5)"
  std::vector<VerbSpec> verbs;
};

struct ParsedCommand {
  std::string verb;
  std::map<std::string, std::vector<std::string>, std::less<>> values;  // by long flag; "" for switches
  std::vector<std::string> operands;  // positionals, then everything after "--"
  bool help = false;
  bool has(std::string_view flag) const { return values.find(flag) != values.end(); }
  const std::string* value(std::string_view flag) const;
};

// Options may come before or after operands; `--flag=VALUE` and `--flag VALUE` both work; a
// switch takes no value. Errors (code "usage") name the problem.
Expected<ParsedCommand> parse_command(const ProgramSpec& program, const std::vector<std::string>& args);
const VerbSpec* find_verb(const ProgramSpec& program, std::string_view name);

std::string usage_text(const ProgramSpec& program);                        // every verb
std::string verb_help(const ProgramSpec& program, const VerbSpec& verb);  // one verb
std::string man_page(const ProgramSpec& program);                         // roff
std::string bash_completion(const ProgramSpec& program);                  // a bash script

}  // namespace motor::cli
