#pragma once
// MinSaver and MaxSaver: keep the checkpoint of the epoch with the lowest (highest) value of a
// monitored scalar (tensorpack's MinSaver/MaxSaver), as min-<scalar>.ckpt (max-...) in a folder,
// a whole trainer checkpoint that tp::load_model or tp::load_checkpoint reads. '/' in the
// scalar's name becomes '_' in the file's. NaN never improves; epochs that did not put the
// scalar do not count. It runs on every process, which follow the chief's decision (one sum
// across the processes per epoch): the chief writes the checkpoint, and in a sharded run every
// process writes its part beside it (tp::save_checkpoint).
//
//   tp::MinSaver(logdir, "val/error")          ->  logdir/min-val_error.ckpt
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tp/checkpoint/files.hpp>
#include <tp/callbacks/detail/plateau.hpp>
#include <tp/io/writable_folder.hpp>

namespace tp {

// The callback behind MinSaver and MaxSaver (Goal: whether lower or higher is better); name it
// through those two aliases.
template <detail::plateau::goal Goal>
class BestSaver {
 public:
  static constexpr bool writes_checkpoint = true;

  BestSaver(std::filesystem::path folder, std::string scalar) : path_(std::move(folder) / file_name(scalar)), plateau_(std::move(scalar), Goal, 0.0) {}

  template <class Trainer>
  void before_train(Trainer&) {
    detail::make_writable_folder(path_.parent_path(), "tp::MinSaver/MaxSaver: the checkpoint folder");
  }
  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    plateau_.see(name, value);
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    const auto stalled = plateau_.end_epoch(trainer.epoch_num());
    bool improved = trainer.is_chief() && stalled && *stalled == 0;
    if (trainer.process_count() > 1) {
      std::vector<double> chief_says{improved ? 1.0 : 0.0};
      trainer.sum_across_processes(chief_says);
      improved = chief_says[0] > 0;
    }
    if (!improved) return;
    save_checkpoint(trainer, path_);
    if (trainer.is_chief()) ++saves_;
  }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return std::string(Goal == detail::plateau::minimize ? "MinSaver(" : "MaxSaver(") + plateau_.scalar() + ")"; }
  template <class Trainer>
  void save_state(Trainer&, state_tree& out) const {
    plateau_.save(out);
  }
  template <class Trainer>
  void load_state(Trainer&, const state_tree& in) {
    plateau_.load(in);
  }

  const std::filesystem::path& path() const noexcept { return path_; }
  std::optional<double> best() const noexcept { return plateau_.best(); }
  int best_epoch() const noexcept { return plateau_.best_epoch(); }
  // Checkpoints written by this run.
  int saves() const noexcept { return saves_; }

 private:
  static std::string file_name(std::string scalar) {
    if (scalar.empty()) throw std::invalid_argument("tp::MinSaver/MaxSaver: the monitored scalar's name is empty");
    for (char& c : scalar)
      if (c == '/' || c == '\\') c = '_';
    return std::string(Goal == detail::plateau::minimize ? "min-" : "max-") + scalar + ".ckpt";
  }

  std::filesystem::path path_;
  detail::plateau plateau_;
  int saves_ = 0;
};

using MinSaver = BestSaver<detail::plateau::minimize>;
using MaxSaver = BestSaver<detail::plateau::maximize>;

}  // namespace tp
