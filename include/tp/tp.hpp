#pragma once
// The umbrella header: the trainer and everything it composes in one process (policies, inputs,
// towers, callbacks, optimizers, checkpoints, evaluation). What only some programs use, and
// what costs every including file compile time, has an umbrella of its own (docs/DESIGN.md,
// "Umbrella headers"):
//
//   <tp/data.hpp>         dataflows (range-v3 views) and the Fashion-MNIST reader
//   <tp/monitors.hpp>     the monitors (console, JSON, TensorBoard) and tp::default_callbacks
//   <tp/distributed.hpp>  many processes: MultiProcess, its backends (c10d), evaluate_across
//
// The library's own headers include only what they use.
#include <tp/batch.hpp>
#include <tp/callback_pack.hpp>
#include <tp/callbacks/callback_time_logger.hpp>
#include <tp/callbacks/cosine_schedule.hpp>
#include <tp/callbacks/early_stopping.hpp>
#include <tp/callbacks/filter_images.hpp>
#include <tp/callbacks/gradient_norm.hpp>
#include <tp/callbacks/human_hyperparam.hpp>
#include <tp/callbacks/inference_runner.hpp>
#include <tp/callbacks/min_max_saver.hpp>
#include <tp/callbacks/model_saver.hpp>
#include <tp/callbacks/moving_average.hpp>
#include <tp/callbacks/numerics_watch.hpp>
#include <tp/callbacks/param_histograms.hpp>
#include <tp/callbacks/profiler.hpp>
#include <tp/callbacks/progress_bar.hpp>
#include <tp/callbacks/reduce_on_plateau.hpp>
#include <tp/callbacks/run_environment.hpp>
#include <tp/callbacks/scheduled_hyperparam.hpp>
#include <tp/callbacks/slurm_requeue.hpp>
#include <tp/callbacks/step_times.hpp>
#include <tp/callbacks/throughput.hpp>
#include <tp/callbacks/trigger.hpp>
#include <tp/callbacks/warmup.hpp>
#include <tp/callbacks/weight_ema.hpp>
#include <tp/checkpoint/files.hpp>
#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/concepts/callback.hpp>
#include <tp/concepts/distribution.hpp>
#include <tp/concepts/input.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/epoch_times.hpp>
#include <tp/evaluate.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/hyperparam.hpp>
#include <tp/inference_model.hpp>
#include <tp/log_dir.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/optim/any_optimizer.hpp>
#include <tp/optim/lamb.hpp>
#include <tp/optim/lars.hpp>
#include <tp/optim/nadam.hpp>
#include <tp/optim/parameter_groups.hpp>
#include <tp/optim/radam.hpp>
#include <tp/policies/comm/in_process.hpp>
#include <tp/policies/comm/nccl.hpp>
#include <tp/policies/distribution/async.hpp>
#include <tp/policies/distribution/parameter_server.hpp>
#include <tp/policies/distribution/replicated.hpp>
#include <tp/policies/distribution/single_device.hpp>
#include <tp/policies/input/dummy_input.hpp>
#include <tp/policies/input/feed_input.hpp>
#include <tp/policies/input/queue_input.hpp>
#include <tp/policies/input/staging_input.hpp>
#include <tp/policies/input/token_windows.hpp>
#include <tp/policies/tower/model_desc.hpp>
#include <tp/precision.hpp>
#include <tp/predictor.hpp>
#include <tp/stop_training.hpp>
#include <tp/tower_context.hpp>
#include <tp/train_options.hpp>
#include <tp/train_outcome.hpp>
#include <tp/trainer.hpp>
#include <tp/trainer/make_trainer.hpp>
#include <tp/update_options.hpp>
