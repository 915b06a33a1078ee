// tp-export: writes a tp checkpoint's weights where other programs read them: as a state_dict
// file (Python's model.load_state_dict(torch.load(...)), tp::load_state_dict), and into the
// TorchScript file the model was trained from, so that Python's torch.jit.load and C++'s
// torch::jit::load run the trained model as it is.
//
//   tp-export CHECKPOINT --state-dict WEIGHTS.pt
//   tp-export CHECKPOINT --scripted-model MODEL.pt -o OUT.pt   (both may be given at once)
//   tp-export CHECKPOINT --whole WHOLE.ckpt   (a sharded run's checkpoint and its parts, as one file)
//
// Into a TorchScript file, the checkpoint's parameters and buffers are checked by name, shape
// and type against the module's (the names of Python's state_dict): a checkpoint of another
// model is an error that names what does not fit. Exit status: 0 on success, 1 on an error,
// 2 on bad flags.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <tp/checkpoint/files.hpp>
#include <tp/scripted_module.hpp>
#include <tp/checkpoint/state_dict.hpp>

int main(int argc, char** argv) try {
  std::string checkpoint, scripted, out, state_dict, whole;
  CLI::App app("Writes a tp checkpoint's weights as a state_dict file, or into the TorchScript file the model was trained from.");
  app.add_option("checkpoint", checkpoint, "a tp checkpoint (model-<step>.ckpt)")->required();
  app.add_option("--state-dict", state_dict, "the state_dict file to write (what torch.save(model.state_dict(), path) writes)");
  auto* scripted_option =
      app.add_option("--scripted-model", scripted, "the TorchScript file the run trained (torch.jit.script(model).save(...))");
  auto* out_option = app.add_option("-o,--output", out, "the TorchScript file to write");
  app.add_option("--whole", whole,
                 "the checkpoint to write: a sharded run's checkpoint with its parts' optimizer state joined in, which loads as an "
                 "unsharded run's (and in Python)");
  out_option->needs(scripted_option);
  scripted_option->needs(out_option);
  try {
    app.parse(argc, argv);
    if (state_dict.empty() && out.empty() && whole.empty()) throw CLI::RequiredError("--state-dict, --whole or --scripted-model with -o");
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  if (!state_dict.empty()) {
    c10::Dict<std::string, torch::Tensor> weights;
    for (const auto& [name, tensor] : tp::checkpoint_weights(checkpoint)) weights.insert(name, tensor);
    tp::detail::write_torch_save(state_dict, c10::impl::toGenericDict(weights));
    std::cout << "tp-export: " << state_dict << ": the state_dict of " << checkpoint << " (" << weights.size() << " tensors)\n";
  }
  if (!whole.empty()) {
    const auto info = tp::write_whole_checkpoint(checkpoint, whole);
    std::cout << "tp-export: " << whole << ": " << checkpoint << " with its parts joined (global step " << info.global_step << ", "
              << info.payload_bytes << " bytes)\n";
  }
  if (!out.empty()) {
    tp::ScriptedModule model(scripted);
    tp::load_model(checkpoint, *model);
    model->save(out);
    std::cout << "tp-export: " << out << ": " << scripted << " with the weights of " << checkpoint << "\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "tp-export: " << e.what() << "\n";
  return 1;
}
