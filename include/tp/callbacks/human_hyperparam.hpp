#pragma once
// HumanHyperParamSetter: hyperparameters changed by hand in a running job (tensorpack's
// HumanHyperParamSetter). Before each epoch, or every N steps, it reads a file of `name: value`
// lines and sets the hyperparameters it names:
//
//   tp::HumanHyperParamSetter(logdir / "hyper.txt", tp::learning_rate(), tp::momentum())
//   tp::HumanHyperParamSetter(logdir / "hyper.txt", tp::learning_rate()).every_steps(100)
//
//   # hyper.txt: blank lines and # comments are skipped
//   learning_rate: 0.01
//
// A value is set when it first appears or when it changes in the file, so a schedule
// (ScheduledHyperParamSetter) still runs between two edits. A missing file changes nothing. A
// bad line (no colon, an unknown name, a value that is not a finite number, a duplicate) is
// reported on stderr with its line number and skipped: never fatal, since the run is live. With
// many processes, the chief reads the file and every process sets what it read.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <tp/hyperparam.hpp>

namespace tp {

template <class... Params>
class HumanHyperParamSetter {
 public:
  explicit HumanHyperParamSetter(std::filesystem::path file, Params... params)
      : file_(std::move(file)), params_(std::move(params)...) {
    static_assert(sizeof...(Params) > 0, "tp::HumanHyperParamSetter: give the hyperparameters the file may set, as tp::learning_rate()");
    std::apply([&](const auto&... p) { names_ = {p.name...}; }, params_);
    for (std::size_t i = 0; i < names_.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (names_[i] == names_[j]) throw std::invalid_argument("tp::HumanHyperParamSetter: " + names_[i] + " is given twice");
  }

  HumanHyperParamSetter& every_steps(std::int64_t n) {
    if (n < 0) throw std::invalid_argument("tp::HumanHyperParamSetter: every_steps must be >= 0 (0: before each epoch), got " + std::to_string(n));
    every_steps_ = n;
    return *this;
  }

  template <class Trainer>
  void before_epoch(Trainer& trainer) {
    if (every_steps_ == 0) check(trainer);
  }
  template <class Trainer>
  void before_step(Trainer& trainer) {
    if (every_steps_ > 0 && trainer.global_step() % every_steps_ == 0) check(trainer);
  }

  // Reads the file and sets what changed (every process calls it at the same point).
  template <class Trainer>
  void check(Trainer& trainer) {
    constexpr std::size_t n = sizeof...(Params);
    std::vector<double> read(2 * n, 0.0);  // [i]: 1 if the file gives param i; [n + i]: its value
    if (trainer.is_chief())
      for (const auto& [i, value] : parse(std::cerr)) read[i] = 1, read[n + i] = value;
    trainer.sum_across_processes(read);  // the chief's reading, everywhere
    for (std::size_t i = 0; i < n; ++i) {
      if (read[i] == 0 || last_[i] == read[n + i]) continue;
      last_[i] = read[n + i];
      set(trainer, i, read[n + i]);
      if (trainer.is_chief())
        std::cerr << "tp::HumanHyperParamSetter: " << names_[i] << " = " << read[n + i] << " from " << file_.string() << " (step "
                  << trainer.global_step() << ")\n";
    }
  }

  // The (parameter index, value) pairs the file gives now; reports bad lines to `report`.
  std::vector<std::pair<std::size_t, double>> parse(std::ostream& report) const {
    std::vector<std::pair<std::size_t, double>> found;
    std::ifstream in(file_);
    if (!in) return found;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const auto skip = [&](const std::string& why) {
        report << "tp::HumanHyperParamSetter: " << file_.string() << " line " << number << ": " << why << "; line skipped\n";
      };
      if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
      const auto name = trim(line.substr(0, line.find(':')));
      if (name.empty() && trim(line).empty()) continue;
      const auto colon = line.find(':');
      if (colon == std::string::npos) {
        skip("expected `name: value`, got \"" + trim(line) + "\"");
        continue;
      }
      std::size_t index = 0;
      while (index < names_.size() && names_[index] != name) ++index;
      if (index == names_.size()) {
        std::string known;
        for (const auto& k : names_) known += (known.empty() ? "" : ", ") + k;
        skip("no hyperparameter named \"" + name + "\" here (known: " + known + ")");
        continue;
      }
      const auto text = trim(line.substr(colon + 1));
      double value = 0;
      std::size_t used = 0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != text.size() || !std::isfinite(value)) {
        skip("the value of " + name + " must be a finite number, got \"" + text + "\"");
        continue;
      }
      if (std::any_of(found.begin(), found.end(), [&](const auto& f) { return f.first == index; })) {
        skip(name + " is given twice; the first one holds");
        continue;
      }
      found.emplace_back(index, value);
    }
    return found;
  }

 private:
  static std::string trim(const std::string& s) {
    const auto first = s.find_first_not_of(" \t\r");
    if (first == std::string::npos) return {};
    return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
  }
  template <class Trainer>
  void set(Trainer& trainer, std::size_t index, double value) {
    std::size_t i = 0;
    std::apply([&](auto&... p) { ((i++ == index ? p.set(trainer, value) : void()), ...); }, params_);
  }

  std::filesystem::path file_;
  std::tuple<Params...> params_;
  std::vector<std::string> names_;
  std::array<std::optional<double>, sizeof...(Params)> last_{};
  std::int64_t every_steps_ = 0;
};

}  // namespace tp
