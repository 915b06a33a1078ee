#pragma once
// What the tests share: a tiny regression problem, the spy callback that records hooks, and
// for the resume tests a temporary folder and a small MLP whose every state a resume must
// bring back.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "built_paths.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/monitors.hpp>
#include <tp/distributed.hpp>
#include <torch/torch.h>

namespace tp_test {

using Batch = torch::data::Example<>;

// y = x . w with 4 inputs; 8 rows.
inline Batch regression_batch(std::int64_t rows = 8, std::int64_t inputs = 4) {
  torch::manual_seed(1);
  auto x = torch::randn({rows, inputs});
  auto y = x.matmul(torch::arange(1, inputs + 1, torch::kFloat).unsqueeze(1));
  return {x, y};
}

inline auto linear_desc(double lr = 0.05) {
  return tp::model_desc([] {
           torch::manual_seed(7);
           return torch::nn::Linear(4, 1);
         })
      .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const Batch& b) {
        return torch::mse_loss(m->forward(b.data), b.target);
      })
      .optimizer([lr](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), lr); });
}

// Records every hook it sees as "hook epoch/local/global", into a log it may share.
struct Spy {
  std::shared_ptr<std::vector<std::string>> log = std::make_shared<std::vector<std::string>>();
  std::string name = "";

  template <class T>
  void record(const char* hook, T& t) {
    log->push_back(name + hook + " " + std::to_string(t.epoch_num()) + "/" + std::to_string(t.local_step()) + "/" +
                   std::to_string(t.global_step()));
  }
  void before_train(auto& t) { record("before_train", t); }
  void before_epoch(auto& t) { record("before_epoch", t); }
  void before_step(auto& t) { record("before_step", t); }
  void after_step(auto& t) { record("after_step", t); }
  void after_epoch(auto& t) { record("after_epoch", t); }
  void on_interrupt(auto& t) { record("on_interrupt", t); }
  void after_train(auto& t) { record("after_train", t); }
};

// Records only the hooks whose name starts with `prefix`.
inline std::vector<std::string> only(const std::vector<std::string>& log, std::string_view prefix) {
  std::vector<std::string> out;
  for (const auto& line : log)
    if (line.starts_with(prefix)) out.push_back(line);
  return out;
}

template <class... Callbacks>
auto make_trainer(tp::TrainOptions options, Callbacks... callbacks) {
  return tp::Trainer(tp::DummyInput(regression_batch()), linear_desc(), tp::SingleDevice(), options,
                     std::move(callbacks)...);
}

// --- resume ----------------------------------------------------------------------------------

// A fresh folder under the system's temporary folder, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) : path(std::filesystem::temp_directory_path() / ("tp_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A small MLP with dropout, trained with SGD + momentum on a shuffled dataflow: everything a
// resume must bring back (weights, momentum, the CPU generator, the dataflow's position).
struct Mlp : torch::nn::Module {
  Mlp() {
    torch::manual_seed(21);
    a = register_module("a", torch::nn::Linear(6, 16));
    b = register_module("b", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return b->forward(torch::dropout(torch::relu(a->forward(x)), 0.25, is_training())); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE_IMPL(MlpHolder, Mlp);

inline auto mlp_flow() {
  torch::manual_seed(4);
  auto x = torch::randn({40, 6});
  auto y = x.sum(1, true);
  return tp::data::examples(x, y) | tp::data::shuffle(9) | tp::data::batch(8);
}

inline auto mlp_desc() {
  return tp::model_desc([] { return MlpHolder(); })
      .tower_function([](const tp::TowerContext&, MlpHolder& m, const Batch& b) { return torch::mse_loss(m->forward(b.data), b.target); })
      .optimizer([](MlpHolder& m) { return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9)); });
}

template <class... Callbacks>
auto mlp_trainer(tp::TrainOptions options, Callbacks... callbacks) {
  return tp::Trainer(tp::FeedInput(mlp_flow()), mlp_desc(), tp::SingleDevice(), std::move(options), std::move(callbacks)...);
}
// Epochs of 7 steps.
template <class... Callbacks>
auto mlp_trainer(int max_epoch, Callbacks... callbacks) {
  return mlp_trainer(tp::TrainOptions().steps_per_epoch(7).max_epoch(max_epoch), std::move(callbacks)...);
}

// --- monitors -------------------------------------------------------------------------------

// A command's standard output, or its exit status and output if it failed.
inline std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "popen failed";
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return status == 0 ? out : "exit status " + std::to_string(status) + ": " + out;
}

// An independent CRC-32C, bit by bit (the library's is table-driven).
inline std::uint32_t bitwise_masked_crc32c(const unsigned char* p, std::size_t n) {
  std::uint32_t crc = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// The records of a TensorBoard event file, each checked for its CRCs, written to
// `scratch/record<i>` and decoded by protoc --decode_raw (an independent protobuf decoder).
inline std::vector<std::string> decode_tensorboard_records(const std::filesystem::path& path, const std::filesystem::path& scratch) {
  const auto bytes = read_all(path);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::vector<std::string> decoded;
  std::size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    if (at + 12 > bytes.size()) break;
    std::uint64_t length;
    std::uint32_t length_crc, data_crc;
    std::memcpy(&length, p + at, 8);
    std::memcpy(&length_crc, p + at + 8, 4);
    EXPECT_EQ(length_crc, bitwise_masked_crc32c(p + at, 8)) << "record at byte " << at;
    EXPECT_LE(at + 12 + length + 4, bytes.size());
    if (at + 12 + length + 4 > bytes.size()) break;
    std::memcpy(&data_crc, p + at + 12 + length, 4);
    EXPECT_EQ(data_crc, bitwise_masked_crc32c(p + at + 12, length)) << "record at byte " << at;
    const auto record = scratch / ("record" + std::to_string(decoded.size()));
    std::ofstream(record, std::ios::binary).write(bytes.data() + at + 12, static_cast<std::streamsize>(length));
    decoded.push_back(run("protoc --decode_raw < " + record.string()));
    at += 12 + length + 4;
  }
  return decoded;
}

// What `f()` throws as Error (its what()), or "(no error)".
template <class Error = std::exception, class F>
std::string error_message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::vector<torch::Tensor> weights_of(auto& trainer) {
  std::vector<torch::Tensor> w;
  for (const auto& p : trainer.model()->parameters()) w.push_back(p.detach().clone());
  return w;
}

// Tensors as raw bytes (contiguous, native order): what the Python peers read and write.
// What f throws, as text ("(no error)" when it throws nothing).
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

inline void write_raw(const std::filesystem::path& file, const torch::Tensor& t) {
  std::ofstream out(file, std::ios::binary);
  const auto c = t.contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}
inline torch::Tensor read_raw(const std::filesystem::path& file, torch::ScalarType type, std::vector<std::int64_t> shape) {
  std::ifstream in(file, std::ios::binary);
  auto t = torch::empty(shape, type);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  EXPECT_TRUE(in) << "cannot read " << file;
  return t;
}

inline void expect_bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].sizes(), b[i].sizes());
    EXPECT_EQ(std::memcmp(a[i].data_ptr(), b[i].data_ptr(), a[i].nbytes()), 0) << "tensor " << i << " differs";
  }
}

}  // namespace tp_test
