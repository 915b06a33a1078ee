#pragma once
// What a step consumes and computes in, as a checkpoint file records it (tp/layout): a run
// resumed on another layout says what changed, and its input goes on at the same place in the
// pass's global order (data/pass_position.hpp). trainer/trainer_state.hpp reads a trainer's
// layout (layout_of) and compares it with the checkpoint's (note_layout).
//
//   processes           processes in the run
//   batches_per_step    batches one process takes per step: towers x micro_batches
//   towers, micro_batches   its two factors (for readers of the file; not compared)
//   batch               datapoints per batch (0 when the input cannot say)
//   precision           "fp32", "bf16-mixed", ... ("" when the tower does not say)
#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Dict.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

struct step_layout {
  std::int64_t processes = 1, batches_per_step = 1, batch = 0;
  std::string precision;
  bool operator==(const step_layout&) const = default;

  // "2 processes x 1 batch of 64 per step", and " in fp32" when asked.
  std::string describe(bool with_precision) const {
    auto plural = [](std::int64_t n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); };
    std::string text = plural(processes, "process", "processes") + " x " + plural(batches_per_step, "batch", "batches");
    if (batch > 0) text += " of " + std::to_string(batch);
    text += " per step";
    return with_precision && !precision.empty() ? text + " in " + precision : text;
  }

  // As a checkpoint file holds it; `towers` splits batches_per_step into its factors.
  c10::impl::GenericDict to_dict(std::int64_t towers) const {
    auto layout = state_tree::new_dict();
    layout.insert("processes", processes);
    layout.insert("batches_per_step", batches_per_step);
    layout.insert("batch", batch);
    layout.insert("towers", towers);
    layout.insert("micro_batches", batches_per_step / towers);
    layout.insert("precision", precision);
    return layout;
  }

  // The layout in a checkpoint's tp section (`own`). `source` names the file in the error a
  // missing or malformed layout raises.
  static step_layout read(const state_tree& own, const std::string& source) {
    if (!own.contains("layout")) throw checkpoint_error(source + " has no tp/layout: it is not a whole tp checkpoint");
    const auto layout = own.at("layout");
    auto count = [&](const char* key) {
      const auto n = layout.integer(key);
      if (n < 0) throw checkpoint_error(source + " has a layout with a negative " + key);
      return n;
    };
    return step_layout{count("processes"), count("batches_per_step"), count("batch"), layout.text("precision")};
  }

  // Whether a step takes the same batches on both: what a step of the user's cannot be carried
  // across (the trainer cannot see what it takes and keeps).
  bool same_batches(const step_layout& other) const {
    return processes == other.processes && batches_per_step == other.batches_per_step && batch == other.batch;
  }
};

// The line a run resumed on `here` from a checkpoint of `saved` prints: "" when nothing
// changed. A precision the checkpoint did not record is not compared.
inline std::string layout_change(const step_layout& saved, step_layout here) {
  if (saved.precision.empty()) here.precision.clear();
  if (saved == here) return {};
  const bool precision_changed = saved.precision != here.precision;
  std::string change = "resumed on " + here.describe(precision_changed) + " from a checkpoint of " + saved.describe(precision_changed);
  if (saved.batch > 0 && here.batch > 0)
    change += ": global batch " + std::to_string(saved.processes * saved.batches_per_step * saved.batch) + " -> " +
              std::to_string(here.processes * here.batches_per_step * here.batch);
  return change;
}

}  // namespace tp::detail
