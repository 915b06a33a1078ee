#pragma once
// Checkpoint files: a trainer's whole state (Trainer::save_state) in one file that says whether
// it is whole.
//
//   bytes 0-7    "TPCKPT" 0 1            magic and format version
//         8-15   payload size            little-endian, like every field
//         16-19  CRC-32C of the payload
//         20-23  reserved (0)
//         24-31  write time, Unix milliseconds
//         32-39  global_step             \ also inside the payload; here so that listing
//         40-47  epoch_num               / checkpoints need not read them
//         48-    payload                 LibTorch's serialize archive (a zip)
//
// Files are written atomically (a temporary file, fsync, rename), so a crash never leaves a
// file under a checkpoint's name that is not whole; the checksum catches what happens to it
// later (a truncated copy, a bad disk). Reading checks the size and checksum before anything
// is loaded.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <tp/detail/archive.hpp>
#include <tp/detail/atomic_file.hpp>
#include <tp/detail/crc32c.hpp>

namespace tp {

struct checkpoint_info {
  std::filesystem::path path;
  std::int64_t global_step = 0;
  std::int64_t epoch_num = 0;
  std::int64_t time_ms = 0;           // when it was written, Unix milliseconds
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc32c = 0;
};

namespace detail {
inline constexpr char checkpoint_magic[8] = {'T', 'P', 'C', 'K', 'P', 'T', 0, 1};
inline constexpr std::size_t checkpoint_header_bytes = 48;

template <class T>
void put_le(unsigned char* at, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(value) >> (8 * i));
}
template <class T>
T get_le(const unsigned char* at) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return static_cast<T>(v);
}

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

// Writes `archive` to `path` atomically, with the header above.
inline checkpoint_info write_checkpoint(const std::filesystem::path& path, torch::serialize::OutputArchive& archive,
                                        std::int64_t global_step, std::int64_t epoch_num) {
  detail::atomic_file_writer file(path);
  unsigned char header[detail::checkpoint_header_bytes] = {};
  file.write(header, sizeof header);  // filled in once the payload's size and checksum are known
  std::uint64_t size = 0;
  std::uint32_t crc = 0;
  archive.save_to([&](const void* data, std::size_t n) -> std::size_t {
    file.write(data, n);
    crc = detail::crc32c_extend(crc, data, n);
    size += n;
    return n;
  });
  checkpoint_info info{path, global_step, epoch_num,
                       std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
                       size, crc};
  std::memcpy(header, detail::checkpoint_magic, 8);
  detail::put_le(header + 8, size);
  detail::put_le(header + 16, crc);
  detail::put_le(header + 24, info.time_ms);
  detail::put_le(header + 32, global_step);
  detail::put_le(header + 40, epoch_num);
  file.write_at(0, header, sizeof header);
  file.commit();
  return info;
}

// The header of a checkpoint file; throws checkpoint_error if it is not one.
inline checkpoint_info read_checkpoint_info(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::bad_checkpoint(path, "cannot be opened");
  unsigned char header[detail::checkpoint_header_bytes];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  if (in.gcount() != static_cast<std::streamsize>(sizeof header))
    detail::bad_checkpoint(path, "is truncated: it ends inside its " + std::to_string(sizeof header) + "-byte header (" +
                                     std::to_string(in.gcount()) + " bytes)");
  if (std::memcmp(header, detail::checkpoint_magic, 8) != 0) detail::bad_checkpoint(path, "is not a tp checkpoint (its first bytes are not TPCKPT)");
  return {path, detail::get_le<std::int64_t>(header + 32), detail::get_le<std::int64_t>(header + 40),
          detail::get_le<std::int64_t>(header + 24), detail::get_le<std::uint64_t>(header + 8),
          detail::get_le<std::uint32_t>(header + 16)};
}

// The payload of a checkpoint, checked whole: throws checkpoint_error saying what is wrong.
inline std::string read_checkpoint_payload(const std::filesystem::path& path) {
  const auto info = read_checkpoint_info(path);
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  const auto expected = detail::checkpoint_header_bytes + info.payload_bytes;
  if (ec || file_size != expected)
    detail::bad_checkpoint(path, "is truncated: it holds " + std::to_string(file_size) + " bytes but its header says " + std::to_string(expected));
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(detail::checkpoint_header_bytes));
  std::string payload(info.payload_bytes, '\0');
  in.read(payload.data(), static_cast<std::streamsize>(payload.size()));
  if (in.gcount() != static_cast<std::streamsize>(payload.size())) detail::bad_checkpoint(path, "could not be read whole");
  if (detail::crc32c(payload.data(), payload.size()) != info.payload_crc32c)
    detail::bad_checkpoint(path, "is corrupt: its checksum does not match its content");
  return payload;
}

// The checkpoints (model-<step>.ckpt) in a folder, oldest step first. Files are not opened.
inline std::vector<std::pair<std::int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& folder) {
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

// Saves a trainer's whole state to `path`.
template <class Trainer>
checkpoint_info save_checkpoint(Trainer& trainer, const std::filesystem::path& path) {
  torch::serialize::OutputArchive archive;
  trainer.save_state(archive);
  return write_checkpoint(path, archive, trainer.global_step(), trainer.epoch_num());
}

namespace detail {
template <class Trainer>
void load_checkpoint_payload(Trainer& trainer, const std::filesystem::path& path, const std::string& payload) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(payload.data(), payload.size());
    trainer.load_state(archive);
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
  detail::load_checkpoint_payload(trainer, path, read_checkpoint_payload(path));
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
    std::string payload;
    try {
      payload = read_checkpoint_payload(path);
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
    detail::load_checkpoint_payload(trainer, path, payload);
    return read_checkpoint_info(path);
  }
  return std::nullopt;
}

// Loads only the model from a checkpoint (for inference): its parameters and buffers, checked
// by name, shape and type.
inline void load_model(const std::filesystem::path& path, torch::nn::Module& module) {
  const auto payload = read_checkpoint_payload(path);
  torch::serialize::InputArchive archive, model;
  try {
    archive.load_from(payload.data(), payload.size());
    detail::read_archive(archive, "model", model);
    detail::load_module(model, module);
  } catch (const checkpoint_error& e) {
    detail::bad_checkpoint(path, std::string("does not fit this model: ") + e.what());
  } catch (const c10::Error& e) {
    detail::bad_checkpoint(path, "cannot be read: " + std::string(e.what_without_backtrace()));
  }
}

}  // namespace tp
