#pragma once
// The examples' command-line errors: the program's name, CLI11's message, and for an unknown
// flag the closest one the program has ("did you mean --max-iters?"), then where the flags are.
//
//   app.failure_message(examples::failure_message("gpt"));
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace examples {

// The edit distance between two strings (insertions, deletions, substitutions).
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The program's long flag closest to `argument` ("--max-iter=5"), or "" when none is close:
// within a third of its length, at least 2 edits.
inline std::string closest_flag(const CLI::App& app, std::string argument) {
  if (!argument.starts_with("--")) return {};
  argument = argument.substr(2, argument.find('=') == std::string::npos ? std::string::npos : argument.find('=') - 2);
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, argument.size() / 3) + 1;
  for (const auto* option : app.get_options())
    for (const auto& name : option->get_lnames())
      if (const auto d = edit_distance(argument, name); d < best_distance) best_distance = d, best = "--" + name;
  return best;
}

inline std::function<std::string(const CLI::App*, const CLI::Error&)> failure_message(std::string program) {
  return [program](const CLI::App* app, const CLI::Error& e) {
    std::string text = program + ": " + e.what() + "\n";
    for (const auto& extra : app->remaining())
      if (const auto hint = closest_flag(*app, extra); !hint.empty()) text += "did you mean " + hint + " for " + extra + "?\n";
    return text + "run " + program + " --help for the flags\n";
  };
}

}  // namespace examples
