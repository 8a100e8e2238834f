#include "cli/command_spec.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace motor::cli {
namespace {

Error usage(std::string message) { return Error{"usage", std::move(message)}; }

const OptionSpec* find_option(const VerbSpec& verb, std::string_view name) {
  for (const OptionSpec& o : verb.options) {
    if (o.flag == name || (!o.short_flag.empty() && o.short_flag == name)) return &o;
  }
  return nullptr;
}

std::string option_synopsis(const OptionSpec& o) {
  std::string s(o.flag);
  if (!o.value.empty()) s += " " + std::string(o.value);
  return "[" + s + "]";
}

std::string verb_synopsis(const ProgramSpec& p, const VerbSpec& v) {
  std::string s = fmt::format("{} {}", p.name, v.name);
  for (const OptionSpec& o : v.options) s += " " + option_synopsis(o);
  if (!v.operands.empty()) s += " " + std::string(v.operands);
  return s;
}

// Roff: backslashes and hyphens escaped, a leading dot or quote neutralized.
std::string roff(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\e";
    else if (c == '-') out += "\\-";
    else {
      if ((c == '.' || c == '\'') && (out.empty() || out.back() == '\n')) out += "\\&";
      out += c;
    }
  }
  return out;
}

// Paragraphs (separated by blank lines) as roff .PP blocks.
std::string roff_paragraphs(std::string_view text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find("\n\n", pos);
    if (end == std::string_view::npos) end = text.size();
    out += ".PP\n" + roff(text.substr(pos, end - pos)) + "\n";
    pos = end + 2;
  }
  return out;
}

// "A: meaning" lines as roff .TP entries.
std::string roff_terms(std::string_view lines) {
  std::string out;
  std::size_t pos = 0;
  while (pos < lines.size()) {
    std::size_t end = std::min(lines.find('\n', pos), lines.size());
    const std::string_view line = lines.substr(pos, end - pos);
    const std::size_t colon = line.find(": ");
    if (colon != std::string_view::npos) {
      out += ".TP\n.B " + roff(line.substr(0, colon)) + "\n" + roff(line.substr(colon + 2)) + "\n";
    }
    pos = end + 1;
  }
  return out;
}

}  // namespace

const std::string* ParsedCommand::value(std::string_view flag) const {
  auto it = values.find(flag);
  return it == values.end() || it->second.empty() ? nullptr : &it->second.back();
}

const VerbSpec* find_verb(const ProgramSpec& program, std::string_view name) {
  for (const VerbSpec& v : program.verbs) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

Expected<ParsedCommand> parse_command(const ProgramSpec& program, const std::vector<std::string>& args) {
  ParsedCommand out;
  const VerbSpec* verb = nullptr;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      continue;
    }
    if (a == "--") {
      out.operands.insert(out.operands.end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a.size() > 1 && a[0] == '-') {
      if (verb == nullptr) return usage(fmt::format("{} comes before the command; give the command first", a));
      const std::size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      const OptionSpec* o = find_option(*verb, name);
      if (o == nullptr) return usage(fmt::format("{} is not an option of {} ({} {} --help lists them)", name, verb->name, program.name, verb->name));
      std::string value;
      if (o->value.empty()) {
        if (eq != std::string::npos) return usage(fmt::format("{} takes no value", name));
      } else if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return usage(fmt::format("{} needs {}", name, o->value));
      }
      auto& slot = out.values[std::string(o->flag)];
      if (!slot.empty() && !o->repeatable) return usage(fmt::format("{} given twice", o->flag));
      slot.push_back(std::move(value));
      continue;
    }
    if (verb == nullptr) {
      verb = find_verb(program, a);
      if (verb == nullptr) return usage(fmt::format("unknown command {}", a));
      out.verb = a;
      continue;
    }
    out.operands.push_back(a);
  }
  return out;
}

std::string usage_text(const ProgramSpec& p) {
  std::string s = "usage:\n";
  for (const VerbSpec& v : p.verbs) s += "  " + verb_synopsis(p, v) + "\n";
  s += fmt::format("  {} --version\n\n", p.name);
  for (const VerbSpec& v : p.verbs) s += fmt::format("  {:<14}{}\n", v.name, v.summary);
  s += fmt::format("\n{} COMMAND --help shows one command's options.\n", p.name);
  return s;
}

std::string verb_help(const ProgramSpec& p, const VerbSpec& v) {
  std::string s = "usage: " + verb_synopsis(p, v) + "\n\n" + std::string(v.summary) + "\n";
  if (!v.description.empty()) s += "\n" + std::string(v.description) + "\n";
  if (!v.options.empty()) s += "\noptions:\n";
  for (const OptionSpec& o : v.options) {
    std::string flag = o.short_flag.empty() ? std::string(o.flag) : fmt::format("{}, {}", o.short_flag, o.flag);
    if (!o.value.empty()) flag += " " + std::string(o.value);
    s += fmt::format("  {:<24} {}\n", flag, o.help);
  }
  return s;
}

std::string man_page(const ProgramSpec& p) {
  std::string upper(p.name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  std::string m = fmt::format(".\\\" Generated by `{} --man` from its command table; do not edit.\n", p.name);
  m += fmt::format(".TH {} {} \"\" \"Motor\" \"Motor\"\n.SH NAME\n{} \\- {}\n.SH SYNOPSIS\n", upper, p.section, p.name, roff(p.summary));
  for (const VerbSpec& v : p.verbs) m += roff(verb_synopsis(p, v)) + "\n.br\n";
  m += ".SH DESCRIPTION\n" + roff_paragraphs(p.description) + ".SH COMMANDS\n";
  for (const VerbSpec& v : p.verbs) {
    m += ".SS " + roff(v.name) + (v.operands.empty() ? "" : " " + roff(v.operands)) + "\n";
    m += roff_paragraphs(std::string(v.summary) + (v.description.empty() ? "" : "\n\n" + std::string(v.description)));
    for (const OptionSpec& o : v.options) {
      m += ".TP\n.B " + roff(o.short_flag.empty() ? std::string(o.flag) : std::string(o.short_flag) + ", " + std::string(o.flag));
      m += o.value.empty() ? "\n" : " \\fI" + roff(o.value) + "\\fR\n";
      m += roff(o.help) + "\n";
    }
  }
  if (!p.exit_status.empty()) m += ".SH EXIT STATUS\n" + roff_terms(p.exit_status);
  if (!p.files.empty()) m += ".SH FILES\n" + roff_terms(p.files);
  if (!p.see_also.empty()) m += ".SH SEE ALSO\n" + roff(p.see_also) + "\n";
  return m;
}

std::string bash_completion(const ProgramSpec& p) {
  std::string fn(p.name);
  std::replace(fn.begin(), fn.end(), '-', '_');
  std::string verbs;
  for (const VerbSpec& v : p.verbs) verbs += (verbs.empty() ? "" : " ") + std::string(v.name);
  std::string s = fmt::format("# bash completion for {} (generated by `{} --completion`; do not edit)\n", p.name, p.name);
  s += fmt::format("_{}() {{\n  local cur=\"${{COMP_WORDS[COMP_CWORD]}}\" prev=\"${{COMP_WORDS[COMP_CWORD-1]}}\" verb=\"\" w\n", fn);
  s += "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do\n    case \"$w\" in -*) ;; *) verb=\"$w\"; break ;; esac\n  done\n";
  s += fmt::format("  if [[ -z \"$verb\" ]]; then COMPREPLY=($(compgen -W \"{} --help --version\" -- \"$cur\")); return; fi\n", verbs);
  s += "  case \"$prev\" in\n";
  std::vector<std::string> file_flags;
  for (const VerbSpec& v : p.verbs) {
    for (const OptionSpec& o : v.options) {
      const bool path = o.value == "FILE" || o.value == "DIR" || o.value == "PATH";
      if (path && std::find(file_flags.begin(), file_flags.end(), o.flag) == file_flags.end()) file_flags.emplace_back(o.flag);
    }
  }
  for (const auto& f : file_flags) s += fmt::format("    {}) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", f);
  s += "  esac\n  case \"$verb\" in\n";
  for (const VerbSpec& v : p.verbs) {
    std::string flags = "--help";
    for (const OptionSpec& o : v.options) flags += " " + std::string(o.flag);
    s += fmt::format("    {}) COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")) ;;\n", v.name, flags);
  }
  s += fmt::format("  esac\n}}\ncomplete -o default -F _{} {}\n", fn, p.name);
  return s;
}

}  // namespace motor::cli
