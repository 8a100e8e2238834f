#include "screen/rules.hpp"

#include <array>
#include <cstdlib>

#include <fmt/format.h>

namespace motor::screen {
namespace {

using P = std::string_view;

constexpr std::array<P, 0> kNone{};

// git's own executable surface: attributes select filter drivers (clean/smudge/process run
// commands on checkout and add), .gitmodules points at other repositories, hook directories
// are run by tools that install them (core.hooksPath, husky, pre-commit).
constexpr auto kGitNames = std::to_array<P>({".gitattributes", ".gitmodules", ".lfsconfig", ".gitconfig"});
constexpr auto kGitDirs = std::to_array<P>({".git", ".githooks", ".git-hooks", "git-hooks", ".husky", "hooks"});

constexpr auto kCiDirs = std::to_array<P>({".github", ".gitlab", ".circleci", ".buildkite", ".azure-pipelines", ".woodpecker",
                                    ".drone", ".devcontainer", ".vscode", ".idea", ".forgejo", ".gitea", ".cirrus"});
constexpr auto kCiNames = std::to_array<P>({".gitlab-ci.yml", "Jenkinsfile", ".travis.yml", "azure-pipelines.yml", ".drone.yml",
                                     "appveyor.yml", ".appveyor.yml", "bitbucket-pipelines.yml", ".cirrus.yml",
                                     ".pre-commit-config.yaml", ".pre-commit-hooks.yaml", ".envrc", "Taskfile.yml",
                                     "Taskfile.yaml", "justfile", ".justfile", "Procfile", "Vagrantfile", "Containerfile",
                                     "compose.yaml", "compose.yml", "tox.ini"});
constexpr auto kCiPrefixes = std::to_array<P>({"Dockerfile", "docker-compose", ".env", "Earthfile"});

constexpr auto kManifestNames = std::to_array<P>({
    "Cargo.toml", "Cargo.lock", "package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock",
    "pnpm-lock.yaml", "pnpm-workspace.yaml", "bun.lock", "bun.lockb", "deno.json", "deno.jsonc", "deno.lock",
    "pyproject.toml", "setup.py", "setup.cfg", "Pipfile", "Pipfile.lock", "poetry.lock", "uv.lock", "pdm.lock",
    "environment.yml", "go.mod", "go.sum", "go.work", "go.work.sum", "Gemfile", "Gemfile.lock", "gems.rb",
    "gems.locked", "composer.json", "composer.lock", "pom.xml", "settings.gradle", "gradle.properties",
    "gradle-wrapper.properties", "mix.lock", "pubspec.yaml", "pubspec.lock", "Package.resolved", "Podfile",
    "Podfile.lock", "Cartfile", "conanfile.txt", "vcpkg.json", "flake.nix", "flake.lock", "default.nix", "shell.nix",
    "packages.config", "Directory.Build.props", "Directory.Build.targets", "Directory.Packages.props",
    "cabal.project", "stack.yaml", "dune-project", "rebar.config", "Project.toml", "Manifest.toml", "cpanfile",
    "Makefile.PL", "DESCRIPTION"});
constexpr auto kManifestPrefixes = std::to_array<P>({"requirements", "constraints", "Pipfile"});
constexpr auto kManifestExtensions = std::to_array<P>({".gemspec", ".csproj", ".fsproj", ".vbproj", ".sln", ".cabal", ".opam",
                                               ".nuspec"});

constexpr auto kBuildNames = std::to_array<P>({
    "build.rs", "Makefile", "GNUmakefile", "makefile", "CMakeLists.txt", "CMakePresets.json",
    "CMakeUserPresets.json", "meson.build", "meson_options.txt", "meson.options", "BUILD", "BUILD.bazel",
    "WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel", ".bazelrc", ".bazelversion", "configure", "configure.ac",
    "configure.in", "Makefile.am", "Makefile.in", "SConstruct", "SConscript", "build.zig", "build.zig.zon",
    "build.sbt", "Rakefile", "build.xml", "gradlew", "mvnw", "rust-toolchain", ".npmrc", ".yarnrc", ".yarnrc.yml",
    ".pnpmfile.cjs", ".nvmrc", ".node-version", ".python-version", ".ruby-version", ".tool-versions", "rustfmt.toml",
    ".rustfmt.toml", "clippy.toml", ".clippy.toml", "Cross.toml", "tsconfig.json", "pytest.ini", "conftest.py",
    "Kconfig"});
constexpr auto kBuildDirs = std::to_array<P>({".cargo", ".mvn", ".gradle", ".yarn", "debian"});
constexpr auto kBuildPrefixes = std::to_array<P>({"Makefile.", "rust-toolchain", "Kbuild", ".eslintrc", ".babelrc",
                                           "babel.config", "webpack.config", "vite.config", "jest.config",
                                           "rollup.config", "vitest.config", ".prettierrc", "tsconfig.", ".bazelrc"});
constexpr auto kBuildExtensions = std::to_array<P>({".cmake", ".mk", ".mak", ".make", ".ninja", ".bzl", ".bazel", ".gn",
                                             ".gni", ".nix", ".am", ".ac", ".m4"});

constexpr auto kSourceExtensions = std::to_array<P>({
    ".rs", ".sh", ".bash", ".zsh", ".ksh", ".csh", ".fish", ".py", ".pyw", ".pyi", ".pyx", ".pxd", ".js", ".mjs",
    ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts", ".c", ".h", ".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx",
    ".h++", ".ipp", ".inl", ".tcc", ".m", ".mm", ".go", ".java", ".kt", ".kts", ".scala", ".sc", ".groovy", ".gradle",
    ".rb", ".rake", ".ru", ".pl", ".pm", ".t", ".php", ".phtml", ".lua", ".swift", ".cs", ".fs", ".fsx", ".vb", ".ps1",
    ".psm1", ".bat", ".cmd", ".r", ".jl", ".ex", ".exs", ".erl", ".hs", ".zig", ".dart", ".vue", ".svelte"});
constexpr auto kMoreSourceExtensions = std::to_array<P>({".ml", ".nim", ".d", ".wasm", ".wat", ".s", ".asm", ".sql", ".tcl",
                                                  ".awk", ".sed", ".vim", ".el", ".cu"});

// The allow-list: text a person reads. Plain text docs and licenses; nothing with a program's
// syntax. Binary files (images) never get here: git calls them binary first.
constexpr auto kDocExtensions = std::to_array<P>({".md", ".markdown", ".rst", ".txt", ".adoc", ".asciidoc", ".mdown"});
constexpr auto kDocNames = std::to_array<P>({"README", "LICENSE", "LICENCE", "COPYING", "COPYRIGHT", "NOTICE", "AUTHORS",
                                      "CONTRIBUTORS", "CHANGELOG", "CHANGES", "HISTORY", "NEWS", "THANKS", "UNLICENSE"});

constexpr auto kNo = Verdict::kDoNotExecute;
constexpr auto kMay = Verdict::kMayExecute;

// THE TABLE. Review every change to it: a new kMayExecute row widens what runs.
constexpr Rule kRules[] = {
    // What git says about the change as a whole or about a file (screen.cpp), in the order checked.
    {"empty_change", kNo, Match::kProperty, kNone,
     "the change is empty: nothing to screen, which more often means a wrong base or a diff that was not read"},
    {"control_character", kNo, Match::kProperty, kNone,
     "a path with a control character (newline, escape, ...), a bidirectional override or invalid UTF-8 can "
     "hide what it names in any listing"},
    {"unmerged", kNo, Match::kProperty, kNone,
     "git reports the file unmerged, or a change type or mode the screen does not know"},
    {"submodule", kNo, Match::kProperty, kNone,
     "a submodule (mode 160000) brings in another repository's code that tools fetch and build"},
    {"symlink", kNo, Match::kProperty, kNone,
     "a symlink (mode 120000) can point a build or a reader anywhere on the host (/etc, a key)"},
    {"mode_change", kNo, Match::kProperty, kNone,
     "a mode or type change (a file turned executable, a file turned into a link) changes what can run"},
    {"executable", kNo, Match::kProperty, kNone, "an executable file (mode 100755) runs whatever its name says"},
    {"binary", kNo, Match::kProperty, kNone,
     "git sees a binary file: it cannot be read as text and may be a program or an archive a build unpacks"},
    {"rename_across_classes", kNo, Match::kProperty, kNone,
     "a rename or copy between rows of this table (README.md to run.sh) carries content into a file that runs"},
    {"unreadable", kNo, Match::kProperty, kNone,
     "the file's content could not be read from git (not in the object store, too large), so it was not checked"},
    {"shebang", kNo, Match::kProperty, kNone, "the file starts with #!: it is a script whatever its name"},
    // Names that refuse.
    {"git_hooks", kNo, Match::kComponent, kGitDirs,
     "a hooks directory: hook installers (core.hooksPath, husky, pre-commit) run what is in it"},
    {"git_config", kNo, Match::kName, kGitNames,
     "git's executable surface: .gitattributes selects filter and diff drivers, .gitmodules fetches repositories"},
    {"ci_directory", kNo, Match::kComponent, kCiDirs,
     "CI and automation (workflows, dev containers, editor tasks) run commands from these directories"},
    {"ci_file", kNo, Match::kName, kCiNames,
     "CI and automation files (pipelines, pre-commit, .envrc, task runners, containers) define commands"},
    {"ci_file_prefix", kNo, Match::kNamePrefix, kCiPrefixes,
     "container and environment files (Dockerfile*, docker-compose*, .env*) define commands and settings"},
    {"dependency_manifest", kNo, Match::kName, kManifestNames,
     "a dependency manifest or lockfile: it decides which third-party code a build downloads and runs"},
    {"dependency_manifest_prefix", kNo, Match::kNamePrefix, kManifestPrefixes,
     "a dependency list (requirements*.txt, constraints*): it decides which packages are installed"},
    {"dependency_manifest_extension", kNo, Match::kExtension, kManifestExtensions,
     "a package or project file (.gemspec, .csproj, .cabal, ...): it names dependencies and build steps"},
    {"build_script", kNo, Match::kName, kBuildNames,
     "a build script or build configuration (build.rs runs at compile time; Makefile, CMakeLists.txt, toolchain "
     "pins, .npmrc)"},
    {"build_directory", kNo, Match::kComponent, kBuildDirs,
     "build tool configuration directories (.cargo/config*, .mvn, debian/rules) change how builds run"},
    {"build_script_prefix", kNo, Match::kNamePrefix, kBuildPrefixes,
     "build tool configuration (rust-toolchain*, Makefile.*, bundler and test runner configs)"},
    {"build_script_extension", kNo, Match::kExtension, kBuildExtensions,
     "build language files (*.cmake, *.mk, *.bzl, *.nix, autotools): a build runs them"},
    {"source_code", kNo, Match::kExtension, kSourceExtensions,
     "source in a language a build or a test runs (Rust, shell, Python, JS/TS, C/C++, Go, Java/Kotlin, Ruby, Perl, "
     "PHP, Lua, ...)"},
    {"source_code_more", kNo, Match::kExtension, kMoreSourceExtensions,
     "source in a language a build or a test runs (assembly, SQL, WebAssembly, editor and text-tool scripts, ...)"},
    // The allow-list.
    {"text_documentation", kMay, Match::kExtension, kDocExtensions,
     "plain text documentation (.md, .rst, .txt, .adoc): read, not run"},
    {"license_and_notes", kMay, Match::kName, kDocNames,
     "a license or notes file without an extension (LICENSE, COPYING, AUTHORS, ...): read, not run"},
    // Everything else.
    {"unknown", kNo, Match::kAnyPath, kNone, "no row of this table names this kind of file: unknown, so not run"},
};

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool matches(const Rule& r, std::string_view path) {
  const auto slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (P p : r.patterns) {
    switch (r.match) {
      case Match::kComponent: {
        std::string_view rest = path;
        while (!rest.empty()) {
          const auto s = rest.find('/');
          if (s == std::string_view::npos) break;  // the last component is the file name
          if (iequal(rest.substr(0, s), p)) return true;
          rest.remove_prefix(s + 1);
        }
        break;
      }
      case Match::kName:
        if (iequal(name, p)) return true;
        break;
      case Match::kNamePrefix:
        if (name.size() >= p.size() && iequal(name.substr(0, p.size()), p)) return true;
        break;
      case Match::kExtension:
        if (name.size() > p.size() && iequal(name.substr(name.size() - p.size()), p)) return true;
        break;
      case Match::kProperty:
      case Match::kAnyPath:
        break;
    }
  }
  return r.match == Match::kAnyPath;
}

}  // namespace

std::span<const Rule> rules() { return kRules; }

const Rule& rule(std::string_view id) {
  for (const auto& r : kRules) {
    if (r.id == id) return r;
  }
  std::abort();  // a programming error: every id used is in the table (unit test)
}

const Rule& classify_path(std::string_view path) {
  for (const auto& r : kRules) {
    if (r.match != Match::kProperty && matches(r, path)) return r;
  }
  return kRules[std::size(kRules) - 1];
}

std::string rules_markdown() {
  std::string out = "| row | verdict | matches | reason |\n|---|---|---|---|\n";
  for (const auto& r : kRules) {
    std::string what;
    switch (r.match) {
      case Match::kProperty: what = "(what git says about the file)"; break;
      case Match::kAnyPath: what = "any other path"; break;
      case Match::kComponent: what = "a directory named "; break;
      case Match::kName: what = "a file named "; break;
      case Match::kNamePrefix: what = "a file name starting with "; break;
      case Match::kExtension: what = "a file name ending in "; break;
    }
    for (size_t i = 0; i < r.patterns.size(); ++i) what += fmt::format("{}`{}`", i ? ", " : "", r.patterns[i]);
    out += fmt::format("| `{}` | {} | {} | {} |\n", r.id, r.verdict == kMay ? "MAY EXECUTE" : "DO NOT EXECUTE", what,
                       r.reason);
  }
  return out;
}

}  // namespace motor::screen
