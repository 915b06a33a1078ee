#pragma once
// tp::evaluate_across<Backend>(env, ...): tp::evaluate (tp/evaluate.hpp) split across the
// processes a launcher started (tp-run, torchrun, srun): each evaluates every world_size-th
// batch of the whole dataflow, and every process returns the results over all the examples.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/policies/distribution/detail/collective_group.hpp>
#include <tp/distributed/environment.hpp>
#include <tp/distributed/rendezvous.hpp>
#include <tp/evaluate.hpp>

namespace tp {

// The same, split across the processes of `env` through Backend (tp::backend::Gloo, or NCCL
// for models on GPUs); one process (world_size 1) needs no connection.
template <class Backend, class Model, class Dataflow, class Infer, class... Inferencers>
std::map<std::string, double> evaluate_across(const process_environment& env, const EvaluateOptions& options, Model& model, Dataflow dataflow,
                                              Infer infer, Inferencers... inferencers) {
  std::tuple<Inferencers...> all(std::move(inferencers)...);
  if (env.world_size <= 1) return detail::evaluate_share(options, model, dataflow, infer, all, {}).first;
  const auto store = detail::connect_store(env, options.wait);
  const auto group = Backend::connect(store, env, options.wait);
  auto [results, examples] = detail::evaluate_share(options, model, dataflow, infer, all, {env.rank, env.world_size});
  // Weigh each process's results by its examples.
  std::vector<double> sums{static_cast<double>(examples)};
  for (const auto& [name, value] : results) sums.push_back(value * static_cast<double>(examples));
  std::vector<torch::Tensor> one{torch::tensor(sums, torch::kDouble).to(Backend::device(env))};
  group->allreduce(one)->wait();
  const auto total = one[0].cpu();
  std::size_t i = 1;
  const double count = total[0].item<double>();
  for (auto& [name, value] : results) value = count > 0 ? total[static_cast<std::int64_t>(i++)].item<double>() / count : 0.0;
  return results;
}

}  // namespace tp
