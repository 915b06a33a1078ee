#pragma once
// JSONWriter: `stats.json` in a log folder (tensorpack's JSONWriter): a list with one object per
// epoch holding epoch_num, global_step and the last value of every scalar put in that epoch.
// The file is rewritten atomically at every epoch's end, so it is always valid JSON. Only the
// chief writes it.
//
// Starting again in the same folder keeps what is there: epochs before this run's first are
// read back and kept, later ones (from a run that went further before it was interrupted) are
// dropped, since this run will write them again.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <tp/detail/atomic_file.hpp>

namespace tp {

class JSONWriter {
 public:
  static constexpr bool chief_only = true;
  static constexpr const char* file_name = "stats.json";

  explicit JSONWriter(std::filesystem::path folder) : path_(std::move(folder) / file_name) {}

  template <class Trainer>
  void before_train(Trainer& trainer) {
    std::filesystem::create_directories(path_.parent_path());
    epochs_ = read(path_);
    std::erase_if(epochs_, [&](const epoch& e) { return e.epoch_num >= trainer.epoch_num() + 1; });
  }
  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    current_[std::string(name)] = value;
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    epochs_.push_back({trainer.epoch_num(), trainer.global_step(), std::move(current_)});
    current_.clear();
    detail::write_file_atomically(path_, render(epochs_));
  }

  const std::filesystem::path& path() const noexcept { return path_; }

  struct epoch {
    std::int64_t epoch_num = 0, global_step = 0;
    std::map<std::string, double> scalars;
  };

  // The epochs a stats.json holds ({} if there is none); throws, naming the file, if it is not
  // one this writer wrote.
  static std::vector<epoch> read(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) return {};
    std::stringstream text;
    text << in.rdbuf();
    return parse(text.str(), path);
  }

 private:
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";  // JSON has no NaN or Inf
    std::ostringstream s;
    s.precision(17);
    s << v;
    return s.str();
  }
  static std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
        continue;
      }
      out += c;
    }
    return out + "\"";
  }
  static std::string render(const std::vector<epoch>& epochs) {
    std::string out = "[\n";
    for (std::size_t i = 0; i < epochs.size(); ++i) {
      const auto& e = epochs[i];
      out += "  {\"epoch_num\": " + std::to_string(e.epoch_num) + ", \"global_step\": " + std::to_string(e.global_step);
      for (const auto& [name, value] : e.scalars) out += ", " + quoted(name) + ": " + number(value);
      out += i + 1 < epochs.size() ? "},\n" : "}\n";
    }
    return out + "]\n";
  }

  // The subset of JSON that render() writes: a list of flat objects of numbers (or null).
  static std::vector<epoch> parse(const std::string& text, const std::filesystem::path& path) {
    std::size_t i = 0;
    auto fail = [&](const std::string& what) {
      return std::runtime_error("tp::JSONWriter: " + path.string() + " is not a stats file tp can continue (" + what +
                                " at byte " + std::to_string(i) + "); move it away, or use another log folder");
    };
    auto skip = [&] {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    };
    auto expect = [&](char c) {
      skip();
      if (i >= text.size() || text[i] != c) throw fail(std::string("expected '") + c + "'");
      ++i;
    };
    auto string = [&] {
      expect('"');
      std::string s;
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        s += text[i++];
      }
      expect('"');
      return s;
    };
    std::vector<epoch> epochs;
    expect('[');
    skip();
    if (i < text.size() && text[i] == ']') return epochs;
    for (;;) {
      expect('{');
      epoch e;
      for (;;) {
        const std::string key = string();
        expect(':');
        skip();
        double value = NAN;
        if (text.compare(i, 4, "null") == 0) {
          i += 4;
        } else {
          std::size_t used = 0;
          try {
            value = std::stod(text.substr(i, 32), &used);
          } catch (const std::exception&) {
            throw fail("expected a number");
          }
          i += used;
        }
        if (key == "epoch_num") e.epoch_num = static_cast<std::int64_t>(value);
        else if (key == "global_step") e.global_step = static_cast<std::int64_t>(value);
        else e.scalars[key] = value;
        skip();
        if (i < text.size() && text[i] == ',') {
          ++i;
          continue;
        }
        expect('}');
        break;
      }
      epochs.push_back(std::move(e));
      skip();
      if (i < text.size() && text[i] == ',') {
        ++i;
        continue;
      }
      expect(']');
      return epochs;
    }
  }

  std::filesystem::path path_;
  std::vector<epoch> epochs_;
  std::map<std::string, double> current_;
};

}  // namespace tp
