// tp-export: writes a tp checkpoint's weights into the TorchScript file the model was trained
// from, so that Python's torch.jit.load and C++'s torch::jit::load run the trained model as it is.
//
//   tp-export CHECKPOINT --scripted-model MODEL.pt -o OUT.pt
//
// The checkpoint's parameters and buffers are checked by name, shape and type against the
// TorchScript module's (the names of Python's state_dict): a checkpoint of another model is an
// error that names what does not fit. Exit status: 0 on success, 1 on an error, 2 on bad flags.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <tp/checkpoint.hpp>
#include <tp/scripted_module.hpp>

int main(int argc, char** argv) try {
  std::string checkpoint, scripted, out;
  CLI::App app("Writes a tp checkpoint's weights into the TorchScript file the model was trained from.");
  app.add_option("checkpoint", checkpoint, "a tp checkpoint (model-<step>.ckpt)")->required();
  app.add_option("--scripted-model", scripted, "the TorchScript file the run trained (torch.jit.script(model).save(...))")->required();
  app.add_option("-o,--output", out, "the TorchScript file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  tp::ScriptedModule model(scripted);
  tp::load_model(checkpoint, *model);
  model->save(out);
  std::cout << "tp-export: " << out << ": " << scripted << " with the weights of " << checkpoint << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "tp-export: " << e.what() << "\n";
  return 1;
}
