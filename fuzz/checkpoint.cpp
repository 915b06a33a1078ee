// libFuzzer target: a checkpoint file's own parts on any bytes: tp's trailer, the torch.save
// content, and a sharded checkpoint's manifest (tp/parts) with the pieces it lists, joined as a
// loading process would. The parts it names are never there: reading one must fail cleanly.
#include <cstddef>
#include <cstdint>
#include <string>

#include <tp/checkpoint/files.hpp>
#include <tp/optim/optimizer_pieces.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size >= tp::detail::checkpoint_trailer_bytes)
    (void)tp::detail::parse_checkpoint_trailer(std::string_view(bytes).substr(size - tp::detail::checkpoint_trailer_bytes));
  try {
    const auto content = tp::detail::to_ivalue(tp::detail::read_torch_save(bytes, "input"), "input");
    const auto parts = tp::detail::checkpoint_parts(content, "/nonexistent/tp-fuzz/model-0000000001.ckpt");
    if (!parts) return 0;
    std::vector<tp::state_piece> targets;
    for (const auto& cover : parts->covers)
      for (const auto& p : cover) targets.push_back(p);
    tp::optim::piece_joiner joiner(targets, std::vector<std::vector<std::int64_t>>(targets.size()));
    joiner.add(tp::state_tree(content, "input"));  // the content as a part: its "pieces", if any
    (void)joiner.states("input");
    (void)parts->read(0);
  } catch (const tp::checkpoint_error&) {
  } catch (const c10::Error&) {
  } catch (const std::out_of_range&) {  // parts->read(k) of a manifest that lists none
  }
  return 0;
}
