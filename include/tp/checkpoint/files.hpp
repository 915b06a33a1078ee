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
//
// A sharded run (Trainer::state_is_sharded) writes one file per process beside the chief's:
// model-<step>.part-<rank>-of-<world>.ckpt holds that process's shard of the optimizer state
// (Trainer::state_part), sealed as above, and the chief's file lists every part in its tp/parts
// (the manifest: file, bytes, crc32c and the pieces it holds), gathered when the state is taken.
// The chief writes its own part before its file; the checkpoint is whole only when its file
// and every part it lists check (size, CRC-32C, and the manifest's size and checksum), which
// loading and resuming verify, so a part that never landed (a process killed while writing)
// or one left by another run makes it a checkpoint that is not whole. Loading reads only the
// parts that hold some of the loading process's pieces, one at a time. The folder must be one
// that every process sees (one machine, or a shared file system).
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
#include <tp/checkpoint/detail/python_pickle.hpp>
#include <tp/checkpoint/state_dict.hpp>
#include <tp/checkpoint/state_parts.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp {

// A checkpoint file found on disk, with the position of the run it holds.
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

// A sharded run's part for `rank` of `world` beside its checkpoint: model-0000000015.ckpt's
// part 1 of 4 is model-0000000015.part-1-of-4.ckpt.
inline std::filesystem::path checkpoint_part_path(const std::filesystem::path& checkpoint, int rank, int world) {
  return checkpoint.parent_path() /
         (checkpoint.stem().string() + ".part-" + std::to_string(rank) + "-of-" + std::to_string(world) + checkpoint.extension().string());
}

namespace detail {
// What one process writes of a checkpoint: taken at the step, written then or in the background.
struct checkpoint_write {
  std::optional<checkpoint_bytes> part;  // a sharded run's part, made now: its size and checksum are in the manifest
  c10::IValue main;                      // the chief's state tree (None on the other processes)
  std::filesystem::path path;
  std::int64_t global_step = 0, epoch_num = 0;

  // The part first, then the chief's file (which says the checkpoint is there); what the last
  // file written says.
  checkpoint_info write() const {
    checkpoint_info info;
    if (part) write_checkpoint_bytes(*part), info = part->info;
    if (!main.isNone()) {
      const auto file = make_checkpoint_bytes(path, main, global_step, epoch_num);
      write_checkpoint_bytes(file);
      info = file.info;
    }
    return info;
  }
};

// Takes the trainer's state for a checkpoint at `path`: every process calls it at the same step.
// A sharded run's processes each make their part's bytes, and tell the chief their sizes and
// checksums (one sum across the processes), which its manifest lists. `to_host`: the chief's tree
// is copied to the CPU's memory (what a write in the background works from).
template <class Trainer>
checkpoint_write take_checkpoint(Trainer& trainer, const std::filesystem::path& path, bool to_host) {
  checkpoint_write w{std::nullopt, c10::IValue(), path, trainer.global_step(), static_cast<std::int64_t>(trainer.epoch_num())};
  c10::impl::GenericDict main(c10::StringType::get(), c10::AnyType::get());
  if (trainer.state_is_sharded()) {
    const int rank = trainer.process_rank(), world = trainer.process_count();
    auto part = trainer.state_part();
    part.insert("rank", std::int64_t{rank});
    part.insert("world_size", std::int64_t{world});
    part.insert("global_step", w.global_step);
    w.part = make_checkpoint_bytes(checkpoint_part_path(path, rank, world), part, w.global_step, w.epoch_num);
    std::vector<double> sizes(2 * static_cast<std::size_t>(world), 0.0);  // exact: sizes < 2^53, checksums < 2^32
    sizes[2 * static_cast<std::size_t>(rank)] = static_cast<double>(w.part->info.payload_bytes);
    sizes[2 * static_cast<std::size_t>(rank) + 1] = static_cast<double>(w.part->info.payload_crc32c);
    trainer.sum_across_processes(sizes);
    if (!trainer.is_chief()) return w;
    main = trainer.state_dict();
    c10::impl::GenericList manifest(c10::AnyType::get());
    for (int r = 0; r < world; ++r) {
      auto entry = state_tree::new_dict();
      entry.insert("file", checkpoint_part_path(path, r, world).filename().string());
      entry.insert("bytes", static_cast<std::int64_t>(sizes[2 * static_cast<std::size_t>(r)]));
      entry.insert("crc32c", static_cast<std::int64_t>(sizes[2 * static_cast<std::size_t>(r) + 1]));
      c10::impl::GenericList pieces(c10::AnyType::get());
      for (const auto& p : trainer.state_part_pieces(r)) {
        c10::impl::GenericList one(c10::AnyType::get());
        for (const auto v : {p.parameter, p.offset, p.length}) one.push_back(v);
        pieces.push_back(one);
      }
      entry.insert("pieces", pieces);
      manifest.push_back(entry);
    }
    main.at("tp").toGenericDict().insert("parts", manifest);
  } else {
    if (!trainer.is_chief()) return w;
    main = trainer.state_dict();
  }
  w.main = to_host ? state_tree::deep_copy(main, /*to_host=*/true) : c10::IValue(main);
  return w;
}

// A sharded checkpoint's parts, as its manifest lists them (nothing for a checkpoint of one
// file); reading one checks it whole and against the manifest.
TP_DECL std::optional<state_parts> checkpoint_parts(const c10::IValue& content, const std::filesystem::path& path);
// Reads every part the manifest lists, one at a time, checking each; throws checkpoint_error.
TP_DECL void verify_checkpoint_parts(const std::optional<state_parts>& parts);
// The part files of a checkpoint found beside it, and whether every one of them is there with
// the size its trailer says (a sharded checkpoint whose parts are still being written is not).
struct parts_on_disk {
  std::vector<std::filesystem::path> files;
  bool complete = true;
};
TP_DECL parts_on_disk checkpoint_parts_on_disk(const std::filesystem::path& checkpoint);

template <class Trainer>
void load_checked_checkpoint(Trainer& trainer, const checked_checkpoint& checked, const c10::IValue& content,
                             const std::optional<state_parts>& parts) {
  const auto& path = checked.info.path;
  try {
    trainer.load_state_dict(content, path.string(), parts ? &*parts : nullptr);
  } catch (const checkpoint_error& e) {
    bad_checkpoint(path, "does not fit this trainer: " + std::string(e.what()));
  } catch (const c10::Error& e) {
    bad_checkpoint(path, "cannot be read: " + std::string(e.what_without_backtrace()));
  }
}
// A checked file's state tree.
inline c10::IValue checkpoint_content(const checked_checkpoint& checked) {
  const auto& path = checked.info.path;
  try {
    return to_ivalue(read_torch_save(checked.payload, path.string()), path.string());
  } catch (const c10::Error& e) {
    bad_checkpoint(path, "cannot be read: " + std::string(e.what_without_backtrace()));
  }
}
}  // namespace detail

// Saves a trainer's whole state to `path`. In a sharded run every process calls it at the same
// step, and each writes its part beside the chief's file.
template <class Trainer>
checkpoint_info save_checkpoint(Trainer& trainer, const std::filesystem::path& path) {
  return detail::take_checkpoint(trainer, path, /*to_host=*/false).write();
}

// Loads a trainer's whole state from `path` (and, from a sharded run's checkpoint, the parts
// this process needs); its next train() goes on from there.
template <class Trainer>
void load_checkpoint(Trainer& trainer, const std::filesystem::path& path) {
  const auto checked = detail::read_checked_checkpoint(path);
  const auto content = detail::checkpoint_content(checked);
  detail::load_checked_checkpoint(trainer, checked, content, detail::checkpoint_parts(content, path));
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
    c10::IValue content;
    std::optional<state_parts> parts;
    try {
      checked = detail::read_checked_checkpoint(path);
      content = detail::checkpoint_content(checked);
      parts = detail::checkpoint_parts(content, path);
      detail::verify_checkpoint_parts(parts);
    } catch (const checkpoint_error& e) {
      log << e.what() << "; ";
      if (trainer.is_chief()) {
        // Its parts go with it: kept for whoever looks, and not overwritten by the next save.
        const auto parts_of_it = detail::checkpoint_parts_on_disk(path).files;
        std::error_code ec;
        std::filesystem::rename(path, path.string() + ".corrupt", ec);
        log << (ec ? "could not rename it (" + ec.message() + ")" : "renamed it to " + path.filename().string() + ".corrupt");
        std::size_t moved = 0;
        for (const auto& part : parts_of_it) {
          std::error_code part_ec;
          std::filesystem::rename(part, part.string() + ".corrupt", part_ec);
          moved += part_ec ? 0 : 1;
        }
        if (!parts_of_it.empty()) log << " and its " << moved << " of " << parts_of_it.size() << " parts likewise";
        log << "; ";
      }
      log << (std::next(it) == found.rend() ? "no older checkpoint: training starts afresh\n" : "trying the one before it\n");
      continue;
    }
    detail::load_checked_checkpoint(trainer, checked, content, parts);
    return checked.info;
  }
  return std::nullopt;
}

// A sharded run's checkpoint and its parts made one file (`to`), as an unsharded run's: its
// optimizer state whole (torch.optim's state_dict when the optimizer has a Python twin). It
// loads on any number of processes, sharded or not, as the sharded one does, and in Python.
// Throws checkpoint_error when `from` or a part is not whole, or `from` is one file already.
TP_DECL checkpoint_info write_whole_checkpoint(const std::filesystem::path& from, const std::filesystem::path& to);

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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <tp/io/atomic_file.hpp>
#include <tp/io/crc32c.hpp>
#include <tp/checkpoint/detail/parameter_pieces.hpp>
#include <tp/optim/optimizer_pieces.hpp>

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
    if (file.size() <= 11 || !file.starts_with("model-") || !file.ends_with(".ckpt")) continue;
    const auto digits = file.substr(6, file.size() - 11);
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    // Skipped, it would be neither resumed from nor written over: the steps after it would be
    // trained, then lost when their checkpoint cannot take its place.
    if (!entry.is_regular_file())
      detail::bad_checkpoint(entry.path(), std::string("is ") + (entry.is_directory() ? "a folder" : "not a regular file") +
                                               ", where tp keeps the checkpoint of step " + std::to_string(std::stoll(digits)) +
                                               ": move it out of " + folder.string() + " and start again");
    found.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

namespace detail {
// A parameter-sharded run's state_dict with its parameters joined from the parts
// (checkpoint/detail/parameter_pieces.hpp); nothing for any other checkpoint.
inline std::optional<c10::impl::GenericDict> joined_state_dict(const checked_checkpoint& checked, const py_value& content,
                                                               const std::filesystem::path& path) {
  const auto* own = content.is_dict() ? content.find("tp") : nullptr;
  // Parts beside a file without tp's section: what joins them was taken out (a re-save of the
  // file that dropped the key), and its state_dict alone lacks the parameters the parts hold.
  if (!own || !own->is_dict()) {
    if (const auto beside = checkpoint_parts_on_disk(path).files; !beside.empty())
      bad_checkpoint(path, "has parts beside it (" + beside.front().filename().string() +
                               ", ...) but no 'tp' section that says what they hold: its weights cannot be read whole. Use the file "
                               "as tp wrote it (a re-save that keeps every key keeps it readable)");
    return std::nullopt;
  }
  if (!own->find("sharded_parameters")) return std::nullopt;
  const auto whole = checkpoint_content(checked);
  const auto parts = checkpoint_parts(whole, path);
  if (!parts) bad_checkpoint(path, "says its parameters are sharded but lists no parts");
  const state_tree all(whole, "");
  return join_parameters(all.value("state_dict"), all.at("tp").at("sharded_parameters"), *parts, path.string());
}
}  // namespace detail

TP_DECL std::vector<std::pair<std::string, torch::Tensor>> checkpoint_weights(const std::filesystem::path& path) {
  const auto checked = detail::read_checked_checkpoint(path);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  const auto content = detail::read_torch_save(checked.payload, path.string());
  if (const auto joined = detail::joined_state_dict(checked, content, path)) {
    for (const auto& entry : *joined) {
      if (!entry.value().isTensor()) detail::bad_checkpoint(path, "has a state_dict entry that is not a tensor by name");
      weights.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    }
    return weights;
  }
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
  const auto checked = detail::read_checked_checkpoint(path);
  try {
    const auto content = detail::read_torch_save(checked.payload, path.string());
    if (const auto joined = detail::joined_state_dict(checked, content, path)) load_state_dict(module, *joined, StateDictOptions(), path.string());
    else load_state_dict(module, content, StateDictOptions(), path.string());
  } catch (const checkpoint_error& e) {
    detail::bad_checkpoint(path, std::string("does not fit this model: ") + e.what());
  } catch (const c10::Error& e) {
    detail::bad_checkpoint(path, "cannot be read: " + std::string(e.what_without_backtrace()));
  }
}

}  // namespace tp

namespace tp::detail {

TP_DECL std::optional<state_parts> checkpoint_parts(const c10::IValue& content, const std::filesystem::path& path) {
  const state_tree all(content, "");
  if (!all.contains("tp") || !all.at("tp").contains("parts")) return std::nullopt;
  state_parts parts;
  struct listed {
    std::string file;
    std::int64_t bytes, crc32c;
  };
  std::vector<listed> files;
  for (const auto& item : all.at("tp").items("parts")) {
    const state_tree entry(item, "tp/parts");
    const auto file = entry.text("file");
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "." || file == "..")
      bad_checkpoint(path, "lists a part named '" + file + "', which is not a file name beside it");
    files.push_back({file, entry.integer("bytes"), entry.integer("crc32c")});
    std::vector<state_piece> pieces;
    for (const auto& p : entry.items("pieces")) {
      if (!p.isList() || p.toListRef().size() != 3 || !p.toListRef()[0].isInt() || !p.toListRef()[1].isInt() || !p.toListRef()[2].isInt())
        bad_checkpoint(path, "lists a piece of part " + file + " that is " + state_tree::describe(p) + ", not [parameter, offset, length]");
      const auto& l = p.toListRef();
      pieces.push_back({l[0].toInt(), l[1].toInt(), l[2].toInt()});
    }
    parts.covers.push_back(std::move(pieces));
  }
  const auto folder = path.parent_path();
  parts.read = [folder, files, path](std::size_t k) {
    const auto& f = files.at(k);
    const auto checked = read_checked_checkpoint(folder / f.file);
    if (static_cast<std::int64_t>(checked.info.payload_bytes) != f.bytes || static_cast<std::int64_t>(checked.info.payload_crc32c) != f.crc32c)
      bad_checkpoint(path, "lists its part " + f.file + " with " + std::to_string(f.bytes) + " bytes and checksum " + std::to_string(f.crc32c) +
                               ", but that file holds " + std::to_string(checked.info.payload_bytes) + " bytes and checksum " +
                               std::to_string(checked.info.payload_crc32c) + ": it is another checkpoint's part (a run that stopped "
                               "before its own part was written)");
    return state_tree(checkpoint_content(checked), f.file);
  };
  return parts;
}

TP_DECL void verify_checkpoint_parts(const std::optional<state_parts>& parts) {
  if (!parts) return;
  for (std::size_t k = 0; k < parts->covers.size(); ++k) (void)parts->read(k);
}

}  // namespace tp::detail

namespace tp {

TP_DECL checkpoint_info write_whole_checkpoint(const std::filesystem::path& from, const std::filesystem::path& to) {
  const auto checked = detail::read_checked_checkpoint(from);
  const auto content = detail::checkpoint_content(checked);
  const auto parts = detail::checkpoint_parts(content, from);
  if (!parts) detail::bad_checkpoint(from, "is not a sharded run's checkpoint: it is whole already");
  const state_tree all(content, from.string());
  const auto options = all.items("optimizer_states").at(0);
  // A parameter-sharded run's parameters, joined from the parts.
  const bool sharded_parameters = all.at("tp").contains("sharded_parameters");
  const state_tree weights(sharded_parameters ? c10::IValue(detail::join_parameters(all.value("state_dict"), all.at("tp").at("sharded_parameters"), *parts, from.string()))
                                              : all.value("state_dict"),
                           from.string() + "/state_dict");
  // Each parameter's name and size, from the parts (a first reading), its shape from the state_dict.
  std::map<std::int64_t, std::string> names;
  std::map<std::int64_t, std::int64_t> sizes;
  for (std::size_t k = 0; k < parts->covers.size(); ++k)
    for (const auto& item : parts->read(k).items("pieces")) {
      const state_tree one(item, "pieces");
      names[one.integer("parameter")] = one.text("name");
      auto& size = sizes[one.integer("parameter")];
      size = std::max(size, one.integer("offset") + one.integer("length"));
    }
  std::size_t positions = 0;
  optim::detail::for_each_listed_parameter(options, from.string() + "/optimizer_states/0", [&](const c10::IValue&, std::size_t) { ++positions; });
  std::vector<optim::piece> targets;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::size_t> at;  // each target's position
  for (const auto& [number, name] : names) {
    if (number < 0 || static_cast<std::size_t>(number) >= positions)
      detail::bad_checkpoint(from, "has a part with a piece of parameter " + std::to_string(number) + " but its optimizer lists " + std::to_string(positions));
    const auto shape = weights.tensor(name).sizes().vec();
    targets.push_back({number, 0, sizes[number]});
    shapes.push_back(shape);
    at.push_back(static_cast<std::size_t>(number));
  }
  optim::piece_joiner joiner(targets, shapes);
  optim::add_parts(joiner, *parts);
  const auto joined = joiner.states(from.string());
  std::vector<c10::IValue> states(positions);
  for (std::size_t t = 0; t < joined.size(); ++t) states[at[t]] = joined[t];
  c10::impl::GenericList optimizers(c10::AnyType::get());
  optimizers.push_back(optim::with_position_states(options, states, from.string()));
  auto whole = state_tree::deep_copy(content).toGenericDict();
  whole.insert_or_assign("optimizer_states", optimizers);
  whole.insert_or_assign("state_dict", weights.dict());
  auto own = whole.at("tp").toGenericDict();
  (void)own.erase("sharded_parameters");
  (void)own.erase("parts");
  (void)own.erase("optimizer_parts");
  return write_checkpoint(to, whole, checked.info.global_step, checked.info.epoch_num);
}

}  // namespace tp

namespace tp::detail {

TP_DECL parts_on_disk checkpoint_parts_on_disk(const std::filesystem::path& checkpoint) {
  parts_on_disk found;
  const auto prefix = checkpoint.stem().string() + ".part-";
  int world = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint.parent_path(), ec)) {
    const auto name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(checkpoint.extension().string())) continue;
    found.files.push_back(entry.path());
    if (const auto of = name.find("-of-"); name.starts_with(prefix + "0-of-") && of != std::string::npos)
      world = std::atoi(name.c_str() + of + 4);
  }
  if (found.files.empty()) return found;  // a checkpoint of one file
  if (world < 1) {
    found.complete = false;
    return found;
  }
  for (int r = 0; r < world; ++r) {
    try {
      (void)read_checkpoint_info(checkpoint_part_path(checkpoint, r, world));
    } catch (const checkpoint_error&) {
      found.complete = false;
    }
  }
  return found;
}

}  // namespace tp::detail
#endif
