#pragma once
// ModelSaver: checkpoints the whole trainer (tensorpack's ModelSaver) into a folder at every
// epoch's end, and optionally every N steps, and resumes from the newest whole checkpoint there
// when training starts again (Keras's BackupAndRestore): running the same command again
// continues where it stopped, to the bit.
//
//   tp::ModelSaver(logdir).keep_last(10).keep_every_hours(0.5)
//
// - Files are model-<global_step>.ckpt (see tp/checkpoint/files.hpp), written atomically, with an
//   index, checkpoints.json, listing what the folder holds, newest last.
// - It keeps the newest keep_last checkpoints and, of the older ones, one every
//   keep_every_hours hours of writing (the first, then each written at least that long after
//   the previous one kept); it deletes the others it wrote. It never deletes a file it cannot
//   read as a checkpoint.
// - Resuming skips (and keeps, renamed .corrupt) a checkpoint that is not whole.
// - When a stop signal or the time budget interrupts training, it saves the step the run
//   stopped after (the on-stop save), unless it has just saved that step.
// - Saving copies the state into the CPU's memory at the step's end, and makes the file and writes
//   it to disk on a thread of its own while training goes on (Lightning's AsyncCheckpointIO):
//   at most one write is in flight, and the next save waits for it. A write that fails leaves
//   no file under a checkpoint's name, and its error stops training at the next save or at the
//   end of train(), with its message. train() returns once the last write is on disk.
//   background(false) writes in the step instead.
// - It runs after every other callback of the step or epoch (a checkpoint writer), so that the
//   state it saves is the state at the end of it. The chief writes the checkpoint; in a sharded
//   run every process also writes its part (its shard of the optimizer state) beside it, and a
//   checkpoint counts as written, for keeping and pruning, once all its parts are on disk
//   (tp/checkpoint/files.hpp). Every process resumes from the checkpoint the chief chose.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <tp/checkpoint/files.hpp>
#include <tp/io/atomic_file.hpp>
#include <tp/io/background_writer.hpp>
#include <tp/io/writable_folder.hpp>

namespace tp {

namespace detail {
// Which of the checkpoints (oldest first) to keep: the newest `keep_last`, and, when every_ms >
// 0, the first and then each written at least every_ms after the previous one kept that way.
inline std::vector<bool> checkpoints_to_keep(const std::vector<checkpoint_info>& all, int keep_last, std::int64_t every_ms) {
  std::vector<bool> keep(all.size(), false);
  std::optional<std::int64_t> last_hourly;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const bool recent = i + static_cast<std::size_t>(keep_last) >= all.size();
    const bool hourly = every_ms > 0 && (!last_hourly || all[i].time_ms >= *last_hourly + every_ms);
    if (hourly) last_hourly = all[i].time_ms;
    keep[i] = recent || hourly;
  }
  return keep;
}
}  // namespace detail

class ModelSaver {
 public:
  static constexpr bool writes_checkpoint = true;
  static constexpr const char* index_name = "checkpoints.json";

  explicit ModelSaver(std::filesystem::path folder) : folder_(std::move(folder)) {}

  // How many of the newest checkpoints to keep (>= 1; default 10).
  ModelSaver& keep_last(int n) {
    if (n < 1) throw std::invalid_argument("tp::ModelSaver: keep_last must be >= 1, got " + std::to_string(n));
    keep_last_ = n;
    return *this;
  }
  // Of the older ones, keep one every `hours` (0: none; default 0.5).
  ModelSaver& keep_every_hours(double hours) {
    if (!(hours >= 0) || !std::isfinite(hours))
      throw std::invalid_argument("tp::ModelSaver: keep_every_hours must be >= 0 (0 keeps none), got " + std::to_string(hours));
    keep_every_ms_ = static_cast<std::int64_t>(hours * 3600'000.0);
    return *this;
  }
  // Also save after every n-th global step (0: only at epoch ends, the default).
  ModelSaver& every_n_steps(std::int64_t n) {
    if (n < 0) throw std::invalid_argument("tp::ModelSaver: every_n_steps must be >= 0, got " + std::to_string(n));
    every_n_steps_ = n;
    return *this;
  }
  // Whether train() resumes from the newest checkpoint in the folder (default true).
  ModelSaver& resume(bool on) {
    resume_ = on;
    return *this;
  }
  // Whether checkpoints are written to disk on a thread of their own (default true).
  ModelSaver& background(bool on) {
    background_ = on;
    return *this;
  }

  template <class Trainer>
  void setup(Trainer& trainer) {
    writer_.wait();  // a second train(): the last one's write is on disk
    detail::make_writable_folder(folder_, "tp::ModelSaver: the checkpoint folder");
    if (trainer.is_chief()) remove_partial_writes();
    resumed_from_.reset();
    last_saved_step_ = -1;
    if (!resume_) return;
    if (trainer.process_count() > 1) {
      // Rank 0 chooses (and sets aside corrupt files); the others load the same checkpoint,
      // once rank 0 has said which: its global step + 1, or 0 for none.
      if (trainer.is_chief()) resumed_from_ = resume_from_latest(trainer, folder_, *log_);
      std::vector<double> chosen{resumed_from_ ? static_cast<double>(resumed_from_->global_step + 1) : 0.0};
      trainer.sum_across_processes(chosen);
      if (!trainer.is_chief() && chosen[0] > 0) {
        const auto path = folder_ / checkpoint_file_name(static_cast<std::int64_t>(chosen[0]) - 1);
        load_checkpoint(trainer, path);
        resumed_from_ = read_checkpoint_info(path);
      }
    } else {
      resumed_from_ = resume_from_latest(trainer, folder_, *log_);
    }
    if (resumed_from_) last_saved_step_ = resumed_from_->global_step;
    if (resumed_from_) {
      *log_ << "tp::ModelSaver: resumed from " << resumed_from_->path.string() << " (global step " << resumed_from_->global_step << "); ";
      if (trainer.starting_epoch() > trainer.max_epoch())
        *log_ << "the run already finished its " << trainer.max_epoch() << " epochs: nothing is left to train (raise max_epoch to train on)\n";
      else
        *log_ << "training goes on at epoch " << trainer.starting_epoch() << "\n";
    }
    if (resumed_from_ && !trainer.layout_change().empty() && trainer.is_chief()) *log_ << "tp::ModelSaver: " << trainer.layout_change() << "\n";
  }
  template <class Trainer>
  void after_step(Trainer& trainer) {
    if (every_n_steps_ == 0 || trainer.global_step() % every_n_steps_ != 0) return;
    if (trainer.local_step() + 1 == trainer.steps_per_epoch()) return;  // after_epoch saves this one
    save(trainer);
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    save(trainer);
  }
  template <class Trainer>
  void on_interrupt(Trainer& trainer) {
    if (last_saved_step_ == trainer.global_step()) return;
    save(trainer);
    if (trainer.is_chief())
      *log_ << "tp::ModelSaver: saving global step " << trainer.global_step() << " on the stop, to "
            << (folder_ / checkpoint_file_name(trainer.global_step())).string()
            << (background_ ? " (train() returns once it is on disk)\n" : "\n");
  }
  // The last write is on disk when train() returns; its error, if any, ends train() with it.
  template <class Trainer>
  void after_train(Trainer&) {
    if (auto error = writer_.wait_quietly()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        *log_ << "tp::ModelSaver: a checkpoint could not be written: " << e.what() << "\n";
      }
      std::rethrow_exception(error);
    }
  }

  const std::filesystem::path& folder() const noexcept { return folder_; }
  // The checkpoint train() resumed from, if it did.
  const std::optional<checkpoint_info>& resumed_from() const noexcept { return resumed_from_; }
  // Where messages go (std::cerr by default).
  ModelSaver& log_to(std::ostream& out) {
    log_ = &out;
    return *this;
  }

 private:
  template <class Trainer>
  void save(Trainer& trainer) {
    last_saved_step_ = trainer.global_step();  // on every process: on_interrupt decides alike
    const auto path = folder_ / checkpoint_file_name(trainer.global_step());
    const bool chief = trainer.is_chief();
    if (!background_) {
      detail::take_checkpoint(trainer, path, /*to_host=*/false).write();
      if (chief) prune_and_index();
      return;
    }
    writer_.wait();  // the last write first (and its error): one copy of the state at a time
    auto files = detail::take_checkpoint(trainer, path, /*to_host=*/true);  // the state at this step
    writer_.start([this, files = std::move(files), chief] {
      files.write();
      if (chief) prune_and_index();
    });
  }

  // A write killed midway leaves <file>.tmp.<pid> (a checkpoint's, the index's, a MinSaver's):
  // never a checkpoint, only litter; so is a part (model-<step>.part-<r>-of-<w>.ckpt) whose
  // checkpoint was never written.
  void remove_partial_writes() const {
    detail::remove_abandoned_temporaries(folder_);
    for (const auto& entry : std::filesystem::directory_iterator(folder_)) {
      const auto name = entry.path().filename().string();
      if (!name.starts_with("model-")) continue;
      const auto part = name.find(".part-");
      const bool litter = part != std::string::npos && name.ends_with(".ckpt") && !std::filesystem::exists(folder_ / (name.substr(0, part) + ".ckpt"));
      if (litter) {
        std::error_code ignored;
        std::filesystem::remove(entry.path(), ignored);
      }
    }
  }

  // Keeps and deletes among the checkpoints whose parts are all on disk (so the newest of them,
  // which a resume falls back on, always stays); one whose parts other processes are still
  // writing is neither listed nor deleted.
  void prune_and_index() {
    std::vector<checkpoint_info> all;
    std::vector<detail::parts_on_disk> parts;
    for (const auto& [step, path] : list_checkpoints(folder_)) {
      try {
        auto info = read_checkpoint_info(path);
        auto on_disk = detail::checkpoint_parts_on_disk(path);
        if (!on_disk.complete) continue;
        all.push_back(std::move(info)), parts.push_back(std::move(on_disk));
      } catch (const checkpoint_error&) {
        // not readable as a checkpoint: neither listed nor deleted
      }
    }
    const auto keep = detail::checkpoints_to_keep(all, keep_last_, keep_every_ms_);
    std::vector<checkpoint_info> kept;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (keep[i]) {
        kept.push_back(all[i]);
      } else {
        std::error_code ignored;
        std::filesystem::remove(all[i].path, ignored);
        for (const auto& part : parts[i].files) std::filesystem::remove(part, ignored);
      }
    }
    std::ostringstream index;
    index << "{\"latest\": \"" << (kept.empty() ? "" : kept.back().path.filename().string()) << "\", \"checkpoints\": [";
    for (std::size_t i = 0; i < kept.size(); ++i)
      index << (i ? ",\n  " : "\n  ") << "{\"file\": \"" << kept[i].path.filename().string() << "\", \"global_step\": " << kept[i].global_step
            << ", \"epoch_num\": " << kept[i].epoch_num << ", \"time_ms\": " << kept[i].time_ms << ", \"bytes\": " << kept[i].payload_bytes + detail::checkpoint_trailer_bytes
            << "}";
    index << "\n]}\n";
    detail::write_file_atomically(folder_ / index_name, index.str());
  }

  std::filesystem::path folder_;
  int keep_last_ = 10;
  std::int64_t keep_every_ms_ = 1800'000;
  std::int64_t every_n_steps_ = 0;
  bool resume_ = true;
  bool background_ = true;
  detail::background_writer writer_;  // declared after what its work reads: destroyed (waited for) first
  std::ostream* log_ = &std::cerr;
  std::optional<checkpoint_info> resumed_from_;
  std::int64_t last_saved_step_ = -1;  // the global step of the newest checkpoint in the folder, if it wrote or resumed it
};

}  // namespace tp
