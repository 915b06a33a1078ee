#pragma once
// ScalarPrinter: the console monitor (tensorpack's ScalarPrinter). It keeps the last value of
// every scalar put during an epoch and prints them, sorted by name, at the epoch's end; with
// print_each_put(true) it also prints every scalar as it is put. Name filters are regular
// expressions matched against the whole name: a name is printed if it matches some include
// pattern (all names when there is none) and no exclude pattern.
#include <cstdint>
#include <iostream>
#include <map>
#include <ostream>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tp {

class ScalarPrinter {
 public:
  static constexpr bool chief_only = true;  // one console, not one per process
  explicit ScalarPrinter(std::ostream& out = std::cout) : out_(&out) {}

  ScalarPrinter& include(const std::string& pattern) { return add(include_, pattern); }
  ScalarPrinter& exclude(const std::string& pattern) { return add(exclude_, pattern); }
  ScalarPrinter& print_each_put(bool enabled) {
    each_put_ = enabled;
    return *this;
  }

  template <class Trainer>
  void on_scalar(Trainer& trainer, std::string_view name, double value) {
    std::string key(name);
    if (!wanted(key)) return;
    if (each_put_) *out_ << "[step " << trainer.global_step() << "] " << key << ": " << value << '\n';
    epoch_values_[std::move(key)] = value;
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    for (const auto& [name, value] : epoch_values_)
      *out_ << "[epoch " << trainer.epoch_num() << "] " << name << ": " << value << '\n';
    out_->flush();
    epoch_values_.clear();
  }

 private:
  ScalarPrinter& add(std::vector<std::regex>& to, const std::string& pattern) {
    try {
      to.emplace_back(pattern);
    } catch (const std::regex_error& e) {
      throw std::invalid_argument("tp::ScalarPrinter: '" + pattern + "' is not a valid regular expression: " + e.what());
    }
    return *this;
  }
  bool wanted(const std::string& name) const {
    auto matches = [&](const std::regex& r) { return std::regex_match(name, r); };
    bool included = include_.empty();
    for (const auto& r : include_) included = included || matches(r);
    if (!included) return false;
    for (const auto& r : exclude_)
      if (matches(r)) return false;
    return true;
  }

  std::ostream* out_;
  std::vector<std::regex> include_, exclude_;
  bool each_put_ = false;
  std::map<std::string, double> epoch_values_;
};

}  // namespace tp
