// The consumer's second file: it uses tp's checkpoint files and model summary, whose functions
// are defined in the headers (header-only) or in tp::compiled, so that a definition that is not
// `inline` in header-only use fails the link here.
#include <filesystem>
#include <string>

#include <tp/tp.hpp>
#include <torch/torch.h>

// Saves the model as torch.save would, loads it into a fresh one, and returns its summary.
std::string round_trip(const torch::nn::Linear& model, const std::filesystem::path& folder) {
  const auto file = folder / "linear.pt";
  tp::save_state_dict(*model, file);
  torch::nn::Linear loaded(3, 1);
  tp::load_state_dict(*loaded, file);
  if (!torch::equal(loaded->weight, model->weight)) return "";
  return tp::model_summary(*loaded);
}
