#pragma once
// JSONWriter: `stats.json` in a log folder (tensorpack's JSONWriter): a list with one object per
// epoch holding epoch_num, global_step and the last value of every scalar put in that epoch.
// The file is rewritten atomically at every epoch's end, so it is always valid JSON. Only the
// chief writes it.
//
// Starting again in the same folder keeps what is there: epochs before this run's first are
// read back and kept, later ones (from a run that went further before it was interrupted) are
// dropped, since this run will write them again. The file is read and written with nlohmann-json,
// so one that another tool wrote or edited continues too (any escapes, key order or number
// form), and the fields tp has no use for (text, lists, objects) are kept as they were.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <tp/io/atomic_file.hpp>
#include <tp/io/writable_folder.hpp>

namespace tp {

class JSONWriter {
  // Ordered: a file keeps its key order when it is rewritten.
  using json = nlohmann::ordered_json;

 public:
  static constexpr bool chief_only = true;
  static constexpr const char* file_name = "stats.json";

  explicit JSONWriter(std::filesystem::path folder) : path_(std::move(folder) / file_name) {}

  template <class Trainer>
  void before_train(Trainer& trainer) {
    detail::make_writable_folder(path_.parent_path(), "tp::JSONWriter: the log folder");
    entries_ = load(path_);
    std::erase_if(entries_, [&](const json& e) { return whole_number(e, "epoch_num") >= trainer.epoch_num() + 1; });
  }
  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    current_[std::string(name)] = value;
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    json entry = {{"epoch_num", trainer.epoch_num()}, {"global_step", trainer.global_step()}};
    for (const auto& [name, value] : current_) entry[name] = value;  // NaN and Inf are written as null
    current_.clear();
    entries_.push_back(std::move(entry));
    detail::write_file_atomically(path_, render(entries_));
  }

  const std::filesystem::path& path() const noexcept { return path_; }

  struct epoch {
    std::int64_t epoch_num = 0, global_step = 0;
    std::map<std::string, double> scalars;  // every number in the entry; null reads as NaN
  };

  // The epochs a stats.json holds ({} if there is none); throws, naming the file, if it is not
  // one this writer can continue.
  static std::vector<epoch> read(const std::filesystem::path& path) {
    std::vector<epoch> epochs;
    for (const auto& entry : load(path)) {
      epoch e{whole_number(entry, "epoch_num"), whole_number(entry, "global_step"), {}};
      for (const auto& field : entry.items()) {
        if (field.key() == "epoch_num" || field.key() == "global_step") continue;
        if (field.value().is_number()) e.scalars[field.key()] = field.value().get<double>();
        else if (field.value().is_null()) e.scalars[field.key()] = NAN;
      }
      epochs.push_back(std::move(e));
    }
    return epochs;
  }

 private:
  // The file's entries, checked: a list of objects, each with a whole epoch_num and global_step.
  static std::vector<json> load(const std::filesystem::path& path) {
    auto fail = [&](const std::string& what) {
      return std::runtime_error("tp::JSONWriter: " + path.string() + " is not a stats file tp can continue (" + what +
                                "); move it away, or use another log folder");
    };
    if (!std::filesystem::exists(path)) return {};
    std::ifstream in(path);
    if (!in) throw fail("it cannot be opened");
    // Said here, not by the parser: nlohmann-json's words for it differ between versions.
    if (in.peek() == std::ifstream::traits_type::eof()) throw fail("it is empty");
    json file;
    try {
      file = json::parse(in);
    } catch (const json::parse_error& e) {
      const std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
      throw fail(what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2));
    }
    if (!file.is_array()) throw fail("it is not a list");
    for (std::size_t i = 0; i < file.size(); ++i) {
      if (!file[i].is_object()) throw fail("entry " + std::to_string(i) + " is not an object");
      for (const char* key : {"epoch_num", "global_step"})
        if (!file[i].contains(key) || !is_whole_number(file[i][key]))
          throw fail("entry " + std::to_string(i) + " has no whole number " + key);
    }
    return file.get<std::vector<json>>();
  }
  static bool is_whole_number(const json& v) {
    if (v.is_number_integer()) return true;
    // Another tool may write 3.0 or 3e0.
    return v.is_number_float() && std::isfinite(v.get<double>()) && std::trunc(v.get<double>()) == v.get<double>();
  }
  static std::int64_t whole_number(const json& entry, const char* key) {
    const auto& v = entry.at(key);
    return v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<double>());
  }

  // One line per epoch, as tensorpack's file reads (nlohmann-json indents all levels or none);
  // the keys and values themselves are nlohmann-json's, escapes and numbers included.
  static std::string render(const std::vector<json>& entries) {
    auto dump = [](const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };  // bad UTF-8 -> U+FFFD
    std::string out = "[\n";
    for (std::size_t i = 0; i < entries.size(); ++i) {
      out += "  {";
      const char* separator = "";
      for (const auto& field : entries[i].items()) {
        out += separator + dump(field.key()) + ": " + dump(field.value());
        separator = ", ";
      }
      out += i + 1 < entries.size() ? "},\n" : "}\n";
    }
    return out + "]\n";
  }

  std::filesystem::path path_;
  std::vector<json> entries_;
  std::map<std::string, double> current_;
};

}  // namespace tp
