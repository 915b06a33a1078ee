// libFuzzer target: the torch.save reader (checkpoint/detail/python_pickle.hpp) on any bytes: the zip, the
// pickle machine and the conversion to a state tree. Damaged input must end in checkpoint_error
// or c10::Error, never a crash, a leak of bounds or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/checkpoint/detail/python_pickle.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)tp::detail::to_ivalue(tp::detail::read_torch_save(bytes, "input"), "input");
  } catch (const tp::checkpoint_error&) {
  } catch (const c10::Error&) {
  }
  return 0;
}
