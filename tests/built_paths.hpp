#pragma once
// Where the build put the programs the tests start, and where the sources are: found when the
// test runs, from the test program's own place (<build>/tests/<program>) and the build's
// CMakeCache.txt. Compiled in as absolute paths they made every clone's objects differ, so the
// compiler cache could not share them between two clones of the project.
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

namespace tp_test {

// The build folder: the parent of the folder this test program is in.
inline const std::filesystem::path& build_dir() {
  static const auto dir = std::filesystem::canonical("/proc/self/exe").parent_path().parent_path();
  return dir;
}

// The project's sources, as the build's CMakeCache.txt names them.
inline const std::string& source_dir() {
  static const std::string dir = [] {
    const auto cache = build_dir() / "CMakeCache.txt";
    std::ifstream in(cache);
    const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
    for (std::string line; std::getline(in, line);)
      if (line.starts_with(key)) return line.substr(key.size());
    throw std::runtime_error("tests: no " + key + " in " + cache.string() + "; run the tests from their build folder");
  }();
  return dir;
}

// A program the build made, by its path in the build folder: a const char* that lives as long
// as the test program, for exec and argument lists.
inline const char* built_program(const char* relative) {
  static std::map<std::string, std::string> paths;
  auto [it, added] = paths.try_emplace(relative, (build_dir() / relative).string());
  return it->second.c_str();
}

}  // namespace tp_test

#define TP_EXPORT (tp_test::built_program("tp-export"))
#define TP_RUN (tp_test::built_program("tp-run"))
#define TP_MP_WORKER (tp_test::built_program("tests/mp_worker"))
#define TP_READ_PASS (tp_test::built_program("tests/read_pass"))
#define TP_RESUME_WORKER (tp_test::built_program("tests/resume_worker"))
#define TP_PYTHON "/usr/bin/python3"  // Debian's python3-torch: the Python peers
