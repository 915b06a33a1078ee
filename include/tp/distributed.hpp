#pragma once
// Many processes: tp::MultiProcess and its backends (Gloo, NCCL, through LibTorch's c10d), the
// launcher's environment (tp-run, torchrun, srun) and evaluate_across. See tp/tp.hpp.
#include <tp/distributed/environment.hpp>
#include <tp/distributed/evaluate_across.hpp>
#include <tp/policies/comm/gloo.hpp>
#include <tp/policies/comm/nccl_backend.hpp>
#include <tp/policies/distribution/multi_process.hpp>
