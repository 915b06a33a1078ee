#pragma once
// Checkpoint files: a trainer's whole state in one file that Python's torch.load opens, and that
// says whether it is whole.
//
// The file is what torch.save writes (a zip whose data.pkl holds the trainer's state tree of
// trainer/trainer_state.hpp: state_dict, optimizer_states, epoch, global_step, loop, rng, input,
// callbacks, tp), and its zip comment, the file's last 120 bytes, is tp's trailer, in ASCII:
//
//   TPCKPT 2 payload=<16 hex> crc32c=<8 hex> time_ms=<16 hex> step=<16 hex> epoch=<16 hex>\n
//
// payload is the byte count before the trailer, crc32c their checksum, time_ms the write time
// (Unix milliseconds); step and epoch are also inside, and here so that listing checkpoints need
// not unpickle them. (Hex digits never spell the zip's end-of-directory mark "PK\5\6", which
// readers search for from the end.)
//
// A checkpoint that Python loaded, changed (a learning rate) and saved with torch.save has no
// trailer: it loads all the same, its records checked by the zip's own CRC-32s, and ModelSaver's
// next checkpoint is sealed again.
//
// Files are written atomically (a temporary file, fsync, rename), so a crash never leaves a
// file under a checkpoint's name that is not whole; the checksum catches what happens to it
// later (a truncated copy, a bad disk). Reading checks the size and checksum before anything
// is loaded.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <tp/compiled_part.hpp>
#include <tp/detail/python_pickle.hpp>
#include <tp/state_dict.hpp>

namespace tp {

struct checkpoint_info {
  std::filesystem::path path;
  std::int64_t global_step = 0;
  std::int64_t epoch_num = 0;
  std::int64_t time_ms = 0;           // when it was written, Unix milliseconds
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc32c = 0;
  // false: a torch.save file without tp's trailer (a checkpoint Python changed and saved again),
  // checked only by its zip's own CRC-32 of each record.
  bool sealed = true;
};

namespace detail {
inline constexpr std::size_t checkpoint_trailer_bytes = 120;

[[noreturn]] inline void bad_checkpoint(const std::filesystem::path& path, const std::string& why) {
  throw checkpoint_error("tp: checkpoint " + path.string() + " " + why);
}
}  // namespace detail

// The checkpoint file name for a global step: model-0000001234.ckpt (sorts by step).
inline std::string checkpoint_file_name(std::int64_t global_step) {
  std::string digits = std::to_string(global_step);
  if (digits.size() < 10) digits.insert(0, 10 - digits.size(), '0');
  return "model-" + digits + ".ckpt";
}


// Writes a checkpoint's dictionary (Trainer::state_dict) to `path` atomically: torch.save's
// zip, with tp's trailer as its comment.
TP_DECL checkpoint_info write_checkpoint(const std::filesystem::path& path, const c10::IValue& content, std::int64_t global_step,
                                         std::int64_t epoch_num);

namespace detail {
// A checkpoint file's whole content, made in memory (the copy of the state a background write
// works from), and what its trailer says; info.path is `path`, where it is meant to go.
struct checkpoint_bytes {
  std::vector<char> zip;  // torch.save's bytes, the comment's length set
  std::string trailer;    // the comment: tp's trailer
  checkpoint_info info;
};
TP_DECL checkpoint_bytes make_checkpoint_bytes(const std::filesystem::path& path, const c10::IValue& content, std::int64_t global_step,
                                               std::int64_t epoch_num);
// Writes them to info.path atomically.
TP_DECL void write_checkpoint_bytes(const checkpoint_bytes& file);
}  // namespace detail

// What a checkpoint file's trailer says; throws checkpoint_error if it is not one.
TP_DECL checkpoint_info read_checkpoint_info(const std::filesystem::path& path);

namespace detail {
// A checkpoint file read once: what its header or trailer says, and its payload.
struct checked_checkpoint {
  checkpoint_info info;
  std::string payload;
};
TP_DECL checked_checkpoint read_checked_checkpoint(const std::filesystem::path& path);
}  // namespace detail

// A checkpoint file's bytes, checked whole (size and checksum). Throws checkpoint_error saying
// what is wrong.
inline std::string read_checkpoint_payload(const std::filesystem::path& path) { return detail::read_checked_checkpoint(path).payload; }

// The checkpoints (model-<step>.ckpt) in a folder, oldest step first. Files are not opened.
TP_DECL std::vector<std::pair<std::int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& folder);

// Saves a trainer's whole state to `path`.
template <class Trainer>
checkpoint_info save_checkpoint(Trainer& trainer, const std::filesystem::path& path) {
  return write_checkpoint(path, trainer.state_dict(), trainer.global_step(), trainer.epoch_num());
}

namespace detail {
template <class Trainer>
void load_checked_checkpoint(Trainer& trainer, const checked_checkpoint& checked) {
  const auto& path = checked.info.path;
  const auto& payload = checked.payload;
  try {
    trainer.load_state_dict(to_ivalue(read_torch_save(payload, path.string()), path.string()), path.string());
  } catch (const checkpoint_error& e) {
    bad_checkpoint(path, "does not fit this trainer: " + std::string(e.what()));
  } catch (const c10::Error& e) {
    bad_checkpoint(path, "cannot be read: " + std::string(e.what_without_backtrace()));
  }
}
}  // namespace detail

// Loads a trainer's whole state from `path`; its next train() goes on from there.
template <class Trainer>
void load_checkpoint(Trainer& trainer, const std::filesystem::path& path) {
  detail::load_checked_checkpoint(trainer, detail::read_checked_checkpoint(path));
}

// Loads the newest whole checkpoint in `folder` into the trainer, and returns it (nothing if
// the folder holds none). A checkpoint that is not whole (truncated, corrupt) is reported on
// `log` and renamed to <name>.corrupt by the chief, so that it is kept but never picked again,
// and the one before it is tried. A whole checkpoint that does not fit the trainer (another
// model) is an error: an older one would not fit either.
template <class Trainer>
std::optional<checkpoint_info> resume_from_latest(Trainer& trainer, const std::filesystem::path& folder,
                                                  std::ostream& log = std::cerr) {
  auto found = list_checkpoints(folder);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const auto& path = it->second;
    detail::checked_checkpoint checked;
    try {
      checked = detail::read_checked_checkpoint(path);
    } catch (const checkpoint_error& e) {
      log << e.what() << "; ";
      if (trainer.is_chief()) {
        std::error_code ec;
        std::filesystem::rename(path, path.string() + ".corrupt", ec);
        log << (ec ? "could not rename it (" + ec.message() + ")" : "renamed it to " + path.filename().string() + ".corrupt") << "; ";
      }
      log << (std::next(it) == found.rend() ? "no older checkpoint: training starts afresh\n" : "trying the one before it\n");
      continue;
    }
    detail::load_checked_checkpoint(trainer, checked);
    return checked.info;
  }
  return std::nullopt;
}

// A checkpoint's model weights by name, without a module to load them into (tp-export writes
// them as a state_dict file).
TP_DECL std::vector<std::pair<std::string, torch::Tensor>> checkpoint_weights(const std::filesystem::path& path);

// Loads only the model from a checkpoint (for inference): its parameters and buffers, checked
// by name, shape and type.
TP_DECL void load_model(const std::filesystem::path& path, torch::nn::Module& module);

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <tp/detail/atomic_file.hpp>
#include <tp/detail/crc32c.hpp>

namespace tp {

namespace detail {
inline std::string hex_field(std::uint64_t value, int digits) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string text(static_cast<std::size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, value >>= 4) text[static_cast<std::size_t>(i)] = hex[value & 15];
  return text;
}
inline std::string checkpoint_trailer(const checkpoint_info& info) {
  return "TPCKPT 2 payload=" + hex_field(info.payload_bytes, 16) + " crc32c=" + hex_field(info.payload_crc32c, 8) +
         " time_ms=" + hex_field(static_cast<std::uint64_t>(info.time_ms), 16) + " step=" + hex_field(static_cast<std::uint64_t>(info.global_step), 16) +
         " epoch=" + hex_field(static_cast<std::uint64_t>(info.epoch_num), 16) + "\n";
}
// The trailer's fields, or nothing when `text` is not one.
inline std::optional<checkpoint_info> parse_checkpoint_trailer(std::string_view text) {
  if (text.size() != checkpoint_trailer_bytes || !text.starts_with("TPCKPT 2 ") || !text.ends_with("\n")) return std::nullopt;
  std::uint64_t fields[5] = {};
  std::size_t at = 9;
  const std::pair<std::string_view, int> layout[5] = {{"payload=", 16}, {" crc32c=", 8}, {" time_ms=", 16}, {" step=", 16}, {" epoch=", 16}};
  for (int f = 0; f < 5; ++f) {
    if (text.substr(at, layout[f].first.size()) != layout[f].first) return std::nullopt;
    at += layout[f].first.size();
    for (int i = 0; i < layout[f].second; ++i, ++at) {
      const char c = text[at];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return std::nullopt;
      fields[f] = fields[f] << 4 | static_cast<std::uint64_t>(digit);
    }
  }
  checkpoint_info info;
  info.payload_bytes = fields[0], info.payload_crc32c = static_cast<std::uint32_t>(fields[1]);
  info.time_ms = static_cast<std::int64_t>(fields[2]), info.global_step = static_cast<std::int64_t>(fields[3]);
  info.epoch_num = static_cast<std::int64_t>(fields[4]);
  return info;
}
}  // namespace detail

TP_DECL checkpoint_info write_checkpoint(const std::filesystem::path& path, const c10::IValue& content, std::int64_t global_step,
                                         std::int64_t epoch_num) {
  const auto file = detail::make_checkpoint_bytes(path, content, global_step, epoch_num);
  detail::write_checkpoint_bytes(file);
  return file.info;
}

TP_DECL detail::checkpoint_bytes detail::make_checkpoint_bytes(const std::filesystem::path& path, const c10::IValue& content,
                                                               std::int64_t global_step, std::int64_t epoch_num) {
  auto bytes = detail::torch_save_bytes(content);
  // The zip ends with its 22-byte end-of-directory record, whose last two bytes are the comment's
  // length (LibTorch writes none).
  const auto n = bytes.size();
  if (n < 22 || std::memcmp(bytes.data() + n - 22, "PK\5\6", 4) != 0 || bytes[n - 2] != 0 || bytes[n - 1] != 0)
    throw std::logic_error("tp::write_checkpoint: LibTorch's zip writer did not end its zip as tp expects (an end-of-directory record "
                           "without a comment); this LibTorch is not supported for checkpoints");
  bytes[n - 2] = static_cast<char>(detail::checkpoint_trailer_bytes & 0xff);
  bytes[n - 1] = static_cast<char>(detail::checkpoint_trailer_bytes >> 8);
  checkpoint_info info{path, global_step, epoch_num,
                       std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
                       n, detail::crc32c(bytes.data(), n)};
  auto trailer = detail::checkpoint_trailer(info);
  return {std::move(bytes), std::move(trailer), std::move(info)};
}

TP_DECL void detail::write_checkpoint_bytes(const checkpoint_bytes& file) {
  detail::atomic_file_writer out(file.info.path);
  out.write(file.zip.data(), file.zip.size());
  out.write(file.trailer.data(), file.trailer.size());
  out.commit();
}

TP_DECL checkpoint_info read_checkpoint_info(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::bad_checkpoint(path, "cannot be opened");
  char magic[4] = {};
  in.read(magic, sizeof magic);
  if (in.gcount() != sizeof magic || std::memcmp(magic, "PK\3\4", 4) != 0)
    detail::bad_checkpoint(path, "is not a tp checkpoint (it is not a zip as torch.save writes)");
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  std::string trailer(detail::checkpoint_trailer_bytes, '\0');
  if (!ec && size >= trailer.size()) {
    in.clear();
    in.seekg(static_cast<std::streamoff>(size - trailer.size()));
    in.read(trailer.data(), static_cast<std::streamsize>(trailer.size()));
  }
  auto info = detail::parse_checkpoint_trailer(trailer);
  // A zip's end-of-directory record without a comment: torch.save's own file (a checkpoint
  // Python loaded, changed and saved), whole as far as the zip can tell.
  if (!info && !ec && size >= 22 && std::memcmp(trailer.data() + trailer.size() - 22, "PK\5\6", 4) == 0 &&
      trailer[trailer.size() - 2] == 0 && trailer[trailer.size() - 1] == 0) {
    const auto content = detail::read_torch_save(path);
    const auto* step = content.is_dict() ? content.find("global_step") : nullptr;
    const auto* epoch = content.is_dict() ? content.find("epoch") : nullptr;
    if (!step || !epoch || step->type() != detail::py_value::kind::integer || epoch->type() != detail::py_value::kind::integer)
      detail::bad_checkpoint(path, "is a torch.save file without global_step and epoch: not a tp checkpoint (a state_dict loads with "
                                   "tp::load_state_dict)");
    checkpoint_info unsealed{path, step->as_int(), epoch->as_int(), 0, size, 0};
    unsealed.sealed = false;
    return unsealed;
  }
  if (!info)
    detail::bad_checkpoint(path, "is truncated, or not a tp checkpoint: it has no tp trailer at its end (a torch.save file of a "
                                 "model's state_dict loads with tp::load_state_dict)");
  info->path = path;
  if (size != info->payload_bytes + detail::checkpoint_trailer_bytes)
    detail::bad_checkpoint(path, "is damaged: it holds " + std::to_string(size) + " bytes but its trailer says " +
                                     std::to_string(info->payload_bytes + detail::checkpoint_trailer_bytes));
  return *info;
}

}  // namespace tp

namespace tp::detail {

TP_DECL checked_checkpoint read_checked_checkpoint(const std::filesystem::path& path) {
  auto info = read_checkpoint_info(path);
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  const auto expected = info.payload_bytes + (info.sealed ? detail::checkpoint_trailer_bytes : 0);
  if (ec || file_size != expected)
    detail::bad_checkpoint(path, "is truncated: it holds " + std::to_string(file_size) + " bytes but its trailer says " + std::to_string(expected));
  std::ifstream in(path, std::ios::binary);
  std::string payload(expected, '\0');
  in.read(payload.data(), static_cast<std::streamsize>(payload.size()));
  if (in.gcount() != static_cast<std::streamsize>(payload.size())) detail::bad_checkpoint(path, "could not be read whole");
  if (info.sealed && detail::crc32c(payload.data(), info.payload_bytes) != info.payload_crc32c)
    detail::bad_checkpoint(path, "is corrupt: its checksum does not match its content");
  return {std::move(info), std::move(payload)};
}

}  // namespace tp::detail

namespace tp {

TP_DECL std::vector<std::pair<std::int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& folder) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) return found;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const auto file = entry.path().filename().string();  // model-<digits>.ckpt
    if (!entry.is_regular_file() || file.size() <= 11 || !file.starts_with("model-") || !file.ends_with(".ckpt")) continue;
    const auto digits = file.substr(6, file.size() - 11);
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    found.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

TP_DECL std::vector<std::pair<std::string, torch::Tensor>> checkpoint_weights(const std::filesystem::path& path) {
  const auto [info, payload] = detail::read_checked_checkpoint(path);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  const auto content = detail::read_torch_save(payload, path.string());
  const std::string source = path.string();  // named: g++ 14 takes a reference returned next to a temporary for a dangling one
  const auto& saved = detail::state_dict_in(content, source);
  for (const auto& [key, value] : saved.entries()) {
    if (key.type() != detail::py_value::kind::string || value.type() != detail::py_value::kind::tensor)
      detail::bad_checkpoint(path, "has a state_dict entry that is not a tensor by name");
    weights.emplace_back(key.as_string(), value.tensor());
  }
  return weights;
}

TP_DECL void load_model(const std::filesystem::path& path, torch::nn::Module& module) {
  const auto [info, payload] = detail::read_checked_checkpoint(path);
  try {
    load_state_dict(module, detail::read_torch_save(payload, path.string()), StateDictOptions(), path.string());
  } catch (const checkpoint_error& e) {
    detail::bad_checkpoint(path, std::string("does not fit this model: ") + e.what());
  } catch (const c10::Error& e) {
    detail::bad_checkpoint(path, "cannot be read: " + std::string(e.what_without_backtrace()));
  }
}

}  // namespace tp
#endif
