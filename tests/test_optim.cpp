// tp's optimizers: NAdam and RAdam step for step against Python's torch.optim (Debian's
// python3-torch), LARS and LAMB against their papers' formulas computed by hand (trust-ratio
// corner cases included), their options' checks, hyperparameter setters, and exact resume with
// each.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <fstream>

#include "support.hpp"

using namespace tp_test;

namespace {

// 100 steps on a 4x3 weight and a bias of 3 with given gradients, lr 0.01 then 0.005 from step 50,
// weight decay 0.01 (what tests/optim/reference_optimizer.py does). Returns [100, 15].
template <class Optimizer, class Options>
torch::Tensor trajectory(const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& gw, const torch::Tensor& gb) {
  auto w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  Optimizer optimizer(std::vector<torch::Tensor>{w, b}, Options(0.01).weight_decay(0.01));
  std::vector<torch::Tensor> steps;
  for (std::int64_t t = 0; t < 100; ++t) {
    if (t == 50)
      for (auto& group : optimizer.param_groups()) group.options().set_lr(0.005);
    w.mutable_grad() = gw[t].clone();
    b.mutable_grad() = gb[t].clone();
    optimizer.step();
    steps.push_back(torch::cat({w.detach().flatten(), b.detach().flatten()}));
  }
  return torch::stack(steps);
}

template <class Optimizer, class Options>
void expect_python_trajectory(const std::string& name) {
  TempDir dir("python_" + name);
  torch::manual_seed(11);
  const auto w0 = torch::randn({4, 3}), b0 = torch::randn({3});
  // Gradients of varied sizes, some entries zero, so that the second moments differ per entry.
  const auto gw = torch::randn({100, 4, 3}) * torch::rand({100, 1, 1}) * 3, gb = torch::randn({100, 3}).clamp_min(-0.5);
  write_raw(dir.path / "w0", w0);
  write_raw(dir.path / "b0", b0);
  write_raw(dir.path / "gw", gw);
  write_raw(dir.path / "gb", gb);
  const std::string command = std::string(TP_PYTHON) + " " + tp_test::source_dir() + "/tests/optim/reference_optimizer.py " + dir.path.string() + " " + name;
  ASSERT_EQ(std::system(command.c_str()), 0) << command << " failed: Python's torch comes from Debian's python3-torch (scripts/setup.sh installs it)";
  const auto python = read_raw(dir.path / "trajectory", torch::kFloat, {100, 15});
  const torch::Tensor ours = trajectory<Optimizer, Options>(w0, b0, gw, gb);
  const double worst = (ours - python).abs().max().item<double>();
  std::printf("largest difference from Python's %s over 100 steps: %.3g\n", name.c_str(), worst);
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT((ours[99] - torch::cat({w0.flatten(), b0.flatten()})).abs().max().item<double>(), 0.05) << "the parameters must have moved";
  EXPECT_GT((ours[50] - ours[49]).abs().max().item<double>(), 0) << "step 50 runs at the new learning rate";
}

}  // namespace

TEST(Optimizers, NAdamFollowsPythonsNAdamFor100Steps) { expect_python_trajectory<tp::optim::NAdam, tp::optim::NAdamOptions>("nadam"); }
TEST(Optimizers, RAdamFollowsPythonsRAdamFor100Steps) { expect_python_trajectory<tp::optim::RAdam, tp::optim::RAdamOptions>("radam"); }

namespace {
// The papers' updates, by hand, in double, for one parameter tensor given as a flat vector.
double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}
std::vector<double> values(const torch::Tensor& t) {
  const auto c = t.to(torch::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}
struct LarsByHand {
  double lr, momentum, weight_decay, eta;
  std::vector<double> v;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    if (v.empty()) v.assign(w.size(), 0);
    const double wn = norm(w), gn = norm(g);
    const double trust = wn > 0 && gn > 0 ? eta * wn / (gn + weight_decay * wn) : 1;
    for (std::size_t i = 0; i < w.size(); ++i) {
      v[i] = momentum * v[i] + lr * trust * (g[i] + weight_decay * w[i]);
      w[i] -= v[i];
    }
  }
};
struct LambByHand {
  double lr, beta1, beta2, eps, weight_decay;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    if (m.empty()) m.assign(w.size(), 0), v.assign(w.size(), 0);
    ++t;
    std::vector<double> u(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(beta1, t)), v_hat = v[i] / (1 - std::pow(beta2, t));
      u[i] = m_hat / (std::sqrt(v_hat) + eps) + weight_decay * w[i];
    }
    const double wn = norm(w), un = norm(u);
    const double trust = wn > 0 && un > 0 ? wn / un : 1;
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * trust * u[i];
  }
};

// Four steps of `Optimizer` on w against the hand-made update; the gradients are given per step.
template <class Optimizer, class Options, class ByHand>
void expect_by_hand(Options options, ByHand by_hand, torch::Tensor w0, const std::vector<torch::Tensor>& gradients) {
  auto w = w0.clone().requires_grad_();
  Optimizer optimizer(std::vector<torch::Tensor>{w}, options);
  auto expected = values(w0);
  for (std::size_t t = 0; t < gradients.size(); ++t) {
    w.mutable_grad() = gradients[t].clone();
    optimizer.step();
    by_hand.step(expected, values(gradients[t]));
    const auto ours = values(w.detach());
    for (std::size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], expected[i], 1e-6) << "step " << t + 1 << ", entry " << i;
  }
}
}  // namespace

TEST(Optimizers, LarsScalesEachLayersStepByItsTrustRatio) {
  torch::manual_seed(2);
  const auto w0 = torch::randn({3, 2});
  std::vector<torch::Tensor> g{torch::randn({3, 2}), torch::randn({3, 2}) * 10, torch::zeros({3, 2}), torch::randn({3, 2})};
  const auto options = tp::optim::LARSOptions(0.5).momentum(0.9).weight_decay(0.01).trust_coefficient(0.02);
  expect_by_hand<tp::optim::LARS>(options, LarsByHand{0.5, 0.9, 0.01, 0.02, {}}, w0, g);
  // Zero weights: the trust ratio is 1, not 0/0.
  expect_by_hand<tp::optim::LARS>(options, LarsByHand{0.5, 0.9, 0.01, 0.02, {}}, torch::zeros({3, 2}), g);
  // A bias with exclude_bias_and_norm: plain momentum SGD, no weight decay, no trust ratio.
  auto bias = torch::ones({4}).requires_grad_();
  tp::optim::LARS excluded(std::vector<torch::Tensor>{bias}, tp::optim::LARSOptions(0.5).weight_decay(0.01).exclude_bias_and_norm(true));
  bias.mutable_grad() = torch::full({4}, 0.2f);
  excluded.step();
  EXPECT_TRUE(torch::allclose(bias.detach(), torch::full({4}, 0.9f))) << bias;
}

TEST(Optimizers, LambScalesAdamsDirectionByTheTrustRatio) {
  torch::manual_seed(3);
  const auto w0 = torch::randn({2, 3});
  std::vector<torch::Tensor> g{torch::randn({2, 3}), torch::randn({2, 3}) * 0.01, torch::zeros({2, 3}), torch::randn({2, 3})};
  const auto options = tp::optim::LAMBOptions(0.01).weight_decay(0.1).eps(1e-6);
  expect_by_hand<tp::optim::LAMB>(options, LambByHand{0.01, 0.9, 0.999, 1e-6, 0.1, {}, {}}, w0, g);
  // Zero weights: trust 1 at the first step. Zero gradients and no decay: u = 0, trust 1, no move.
  expect_by_hand<tp::optim::LAMB>(options, LambByHand{0.01, 0.9, 0.999, 1e-6, 0.1, {}, {}}, torch::zeros({2, 3}), g);
  expect_by_hand<tp::optim::LAMB>(tp::optim::LAMBOptions(0.01), LambByHand{0.01, 0.9, 0.999, 1e-6, 0, {}, {}}, w0,
                                  {torch::zeros({2, 3}), torch::zeros({2, 3})});
}

TEST(Optimizers, BadOptionsNameTheOptimizerAndTheRange) {
  auto message = [](auto make) { return error_message_of<std::invalid_argument>(make); };
  auto w = std::vector<torch::Tensor>{torch::zeros({2}, torch::requires_grad())};
  EXPECT_EQ(message([&] { tp::optim::NAdam(w, tp::optim::NAdamOptions(-1)); }), "tp::optim::NAdam: lr must be >= 0.000000, got -1.000000");
  EXPECT_EQ(message([&] { tp::optim::RAdam(w, tp::optim::RAdamOptions().betas({0.9, 1.0})); }),
            "tp::optim::RAdam: betas[1] must be in [0, 1), got 1.000000");
  EXPECT_EQ(message([&] { tp::optim::LARS(w, tp::optim::LARSOptions().trust_coefficient(-0.1)); }),
            "tp::optim::LARS: trust_coefficient must be >= 0.000000, got -0.100000");
  EXPECT_EQ(message([&] { tp::optim::LAMB(w, tp::optim::LAMBOptions().weight_decay(-1)); }),
            "tp::optim::LAMB: weight_decay must be >= 0.000000, got -1.000000");
}

namespace {
template <class MakeOptimizer>
auto mlp_with(MakeOptimizer make) {
  return tp::model_desc([] { return MlpHolder(); })
      .tower_function([](const tp::TowerContext&, MlpHolder& m, const Batch& b) { return torch::mse_loss(m->forward(b.data), b.target); })
      .optimizer(make);
}
struct SignalInStep9 {
  void before_step(auto& t) {
    if (t.global_step() == 8) std::raise(SIGTERM);
  }
};

// Trained with the optimizer `make` builds, stopped after step 9 with a checkpoint and resumed,
// it ends with the bits of an uninterrupted run; the hyperparameter setters reach its options.
template <class MakeOptimizer>
void expect_exact_resume(const std::string& name, MakeOptimizer make) {
  SCOPED_TRACE(name);
  TempDir dir("resume_" + name);
  std::ostringstream log;
  auto options = tp::TrainOptions().steps_per_epoch(7).max_epoch(3);
  auto run = [&](auto... callbacks) {
    auto t = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_with(make), tp::SingleDevice(), options, callbacks...);
    t.train();
    return weights_of(t);
  };
  run(SignalInStep9{}, tp::ModelSaver(dir.path).log_to(log));
  const auto straight = run();
  expect_bitwise_equal(run(tp::ModelSaver(dir.path).log_to(log)), straight);
  EXPECT_FALSE(torch::equal(straight[0], MlpHolder()->a->weight)) << "the optimizer must have trained";
  // Its state is plain values in the file: torch.optim's format, or LibTorch's entries as
  // nested dictionaries whose tensors are the optimizer's own (float), never archive bytes.
  const auto saved = tp::detail::read_torch_save(tp::list_checkpoints(dir.path).back().second);
  const auto state = saved.find("optimizer_states")->items().at(0);
  ASSERT_TRUE(state.is_dict()) << state.describe();
  if (const auto* own = state.find("libtorch")) {
    std::vector<const tp::detail::py_value*> todo{own};
    int tensors = 0;
    while (!todo.empty()) {
      const auto* v = todo.back();
      todo.pop_back();
      if (v->is_tensor()) {
        EXPECT_TRUE(v->tensor().is_floating_point() || v->tensor().scalar_type() == torch::kLong) << v->describe();
        ++tensors;
      } else if (v->is_dict()) for (const auto& [key, inner] : v->entries()) todo.push_back(&inner);
    }
    EXPECT_GT(tensors, 0);
  } else {
    EXPECT_NE(state.find("param_groups"), nullptr);
  }

  auto t = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_with(make), tp::SingleDevice(), options);
  tp::learning_rate().set(t, 0.125);
  EXPECT_EQ(tp::learning_rate().get(t), 0.125);
  tp::weight_decay().set(t, 0.25);
  EXPECT_EQ(tp::weight_decay().get(t), 0.25);
  tp::momentum().set(t, 0.5);
  EXPECT_EQ(tp::momentum().get(t), 0.5);

  // Under multi-tower policies: every tower's replica applies the same update.
  auto replicated = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_with(make), tp::Replicated<>::cpu(2), options);
  replicated.train();
  EXPECT_TRUE(replicated.replicas().identical());
  auto server = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_with(make), tp::ParameterServer<>::cpu(2), options);
  server.train();
  EXPECT_FALSE(torch::equal(weights_of(server)[0], MlpHolder()->a->weight));
}
}  // namespace

TEST(Optimizers, EachResumesExactlyFromACheckpointAndTakesHyperparameterSetters) {
  expect_exact_resume("nadam", [](MlpHolder& m) { return tp::optim::NAdam(m->parameters(), tp::optim::NAdamOptions(0.01).weight_decay(1e-3)); });
  expect_exact_resume("radam", [](MlpHolder& m) { return tp::optim::RAdam(m->parameters(), tp::optim::RAdamOptions(0.01).weight_decay(1e-3)); });
  expect_exact_resume("lars", [](MlpHolder& m) {
    return tp::optim::LARS(m->parameters(), tp::optim::LARSOptions(0.5).weight_decay(1e-3).exclude_bias_and_norm(true));
  });
  expect_exact_resume("lamb", [](MlpHolder& m) { return tp::optim::LAMB(m->parameters(), tp::optim::LAMBOptions(0.01).weight_decay(0.01)); });
}

namespace {

// An optimizer over two tensors (12 and 5 elements), stepped three times.
template <class Optimizer, class Options>
std::pair<std::vector<torch::Tensor>, std::unique_ptr<Optimizer>> stepped(Options options) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> params{torch::randn({3, 4}, torch::requires_grad()), torch::randn({5}, torch::requires_grad())};
  auto optimizer = std::make_unique<Optimizer>(params, options);
  for (int i = 0; i < 3; ++i) {
    optimizer->zero_grad();
    (params[0].pow(2).sum() + params[1].sin().sum()).backward();
    optimizer->step();
  }
  return {params, std::move(optimizer)};
}

// Its state cut into pieces (odd cuts, across both tensors), as parts of a sharded checkpoint.
tp::state_parts cut(const c10::IValue& state, const std::vector<std::vector<tp::state_piece>>& cuts) {
  const auto states = tp::optim::position_states(state, "test");
  tp::state_parts parts;
  std::vector<c10::IValue> trees;
  for (const auto& pieces : cuts) {
    std::vector<c10::IValue> piece_states;
    for (const auto& p : pieces) {
      auto one = tp::state_tree::new_dict();
      for (const auto& entry : states[static_cast<std::size_t>(p.parameter)].toGenericDict()) {
        const auto& v = entry.value();
        one.insert(entry.key(), v.isTensor() && v.toTensor().dim() >= 1 ? c10::IValue(v.toTensor().reshape(-1).narrow(0, p.offset, p.length).clone()) : v);
      }
      piece_states.push_back(one);
    }
    auto part = tp::state_tree::new_dict();
    part.insert("pieces", tp::optim::saved_pieces(piece_states, pieces, std::vector<std::string>(pieces.size(), "w")));
    trees.push_back(part);
    parts.covers.push_back(pieces);
  }
  parts.read = [trees](std::size_t k) { return tp::state_tree(trees.at(k), "part " + std::to_string(k)); };
  return parts;
}

}  // namespace

// A state cut into pieces on one layout and joined on another gives the state back: the whole
// optimizer's, bit for bit, and a shard's (a piece of each tensor) as the shard's own cut of it.
// A part missing is an error that says how much of which parameter is there.
TEST(OptimizerPieces, AStateCutOnOneLayoutJoinsOnAnother) {
  const auto [params, adam] = stepped<torch::optim::Adam>(torch::optim::AdamOptions(0.1).weight_decay(0.01));
  const auto saved = tp::optim::state_of(*adam);
  const std::vector<std::vector<tp::state_piece>> cuts{{{0, 0, 7}}, {{0, 7, 5}, {1, 0, 2}}, {{1, 2, 3}}};
  const auto parts = cut(saved, cuts);

  std::vector<torch::Tensor> fresh{torch::zeros({3, 4}, torch::requires_grad()), torch::zeros({5}, torch::requires_grad())};
  torch::optim::Adam whole(fresh, torch::optim::AdamOptions(0.1).weight_decay(0.01));
  auto [pieces, shapes] = tp::optim::whole_pieces(whole);
  tp::optim::load_joined(whole, pieces, shapes, parts, "test");
  const auto states = tp::optim::position_states(tp::optim::state_of(whole), "joined");
  const auto expected = tp::optim::position_states(saved, "saved");
  ASSERT_EQ(states.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i)
    for (const char* key : {"exp_avg", "exp_avg_sq", "step"})
      EXPECT_TRUE(torch::equal(states[i].toGenericDict().at(key).toTensor(), expected[i].toGenericDict().at(key).toTensor())) << key << " of " << i;

  // A shard: elements 3..9 of the first tensor and 4..5 of the second, as flat views.
  std::vector<torch::Tensor> shard{torch::zeros({6}, torch::requires_grad()), torch::zeros({1}, torch::requires_grad())};
  torch::optim::Adam sharded(shard, torch::optim::AdamOptions(0.1));
  tp::optim::load_joined(sharded, {{0, 3, 6}, {1, 4, 1}}, {}, parts, "test");
  const auto mine = tp::optim::position_states(tp::optim::state_of(sharded), "shard");
  EXPECT_TRUE(torch::equal(mine[0].toGenericDict().at("exp_avg").toTensor(),
                           expected[0].toGenericDict().at("exp_avg").toTensor().reshape(-1).narrow(0, 3, 6)));
  EXPECT_TRUE(torch::equal(mine[1].toGenericDict().at("exp_avg_sq").toTensor(),
                           expected[1].toGenericDict().at("exp_avg_sq").toTensor().narrow(0, 4, 1)));

  auto missing = parts;
  missing.covers.pop_back();  // the last part (elements 2..4 of the second tensor) is gone
  torch::optim::Adam again(fresh, torch::optim::AdamOptions(0.1));
  std::tie(pieces, shapes) = tp::optim::whole_pieces(again);
  try {
    tp::optim::load_joined(again, pieces, shapes, missing, "the checkpoint");
    ADD_FAILURE() << "a part was missing and nothing said so";
  } catch (const tp::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("its parts hold 2 of the 5 elements of parameter 1"), std::string::npos) << e.what();
  }
}
