// Type-checks tp's CUDA and NCCL code paths (TP_WITH_CUDA) on a machine without a GPU:
// StagingInput on a CUDA device (over QueueInput: pinned batches, its position), Replicated<NCCL> and MultiProcess<backend::NCCL>, fp16-mixed
// precision with its loss scaler, and the CUDA generators in checkpoints. Compiled with -fsyntax-only; nothing is
// linked or run. The GPU tests themselves run where LibTorch has CUDA.
#include <tp/policies/comm/nccl_backend.hpp>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <torch/torch.h>

int main() {
  auto desc = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const torch::Tensor& x) { return m->forward(x).sum(); })
                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  tp::Trainer trainer(tp::StagingInput(tp::DummyInput(torch::zeros({2, 4})), torch::Device("cuda:0")), desc,
                      tp::Replicated<tp::NCCL>({torch::Device("cuda:0")}), tp::TrainOptions().steps_per_epoch(1));
  trainer.train();
  tp::Trainer processes(tp::DummyInput(torch::zeros({2, 4})), desc, tp::MultiProcess<tp::backend::NCCL>(), tp::TrainOptions().steps_per_epoch(1));
  processes.train();
  auto fp16 = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const torch::Tensor& x) { return m->forward(x).sum(); })
                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); })
                  .precision(tp::precision::fp16_mixed);
  tp::Trainer half(tp::DummyInput(torch::zeros({2, 4})), fp16, tp::MultiProcess<tp::backend::NCCL>().accumulate(2), tp::TrainOptions().steps_per_epoch(1));
  half.train();
  tp::Trainer half_towers(tp::DummyInput(torch::zeros({2, 4})), fp16, tp::Replicated<tp::NCCL>({torch::Device("cuda:0")}).accumulate(2),
                          tp::TrainOptions().steps_per_epoch(1));
  half_towers.train();
  auto flow = tp::data::examples(torch::zeros({8, 4}), torch::zeros({8}, torch::kLong)) | tp::data::batch(2);
  tp::StagingInput queued(tp::QueueInput(std::move(flow)), torch::Device("cuda:0"));
  queued.restore(queued.position());
  tp::Trainer from_queue(std::move(queued), tp::model_desc([] { return torch::nn::Linear(4, 1); })
                                                .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const torch::data::Example<>& b) {
                                                  return m->forward(b.data).sum();
                                                })
                                                .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); }),
                         tp::SingleDevice(torch::Device("cuda:0")), tp::TrainOptions().steps_per_epoch(1));
  from_queue.train();
  (void)half_towers.state_dict();
}
