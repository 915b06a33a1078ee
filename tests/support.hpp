#pragma once
// What the tests share: a tiny regression problem and the spy callback that records hooks.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <tp/tp.hpp>
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

}  // namespace tp_test
