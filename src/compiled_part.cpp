// tp's compiled part (include/tp/compiled_part.hpp): the functions its headers define inside
// `#if TP_DEFINE_COMPILED_PART`, compiled once. CMake's tp::compiled target builds this file with
// TP_SEPARATE_COMPILATION and TP_BUILDING_COMPILED_PART; a program that links it defines
// TP_SEPARATE_COMPILATION in every file. tools/check_compiled_part.py checks that every header
// with such definitions is included here.
#define TP_BUILDING_COMPILED_PART
#include <tp/checkpoint/files.hpp>
#include <tp/process/intra_op_threads.hpp>
#include <tp/process/freed_memory.hpp>
#include <tp/checkpoint/detail/python_pickle.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/trainer/detail/signals.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/model_summary.hpp>
#include <tp/optim/torch_optim_state.hpp>
#include <tp/policies/distribution/single_device.hpp>
#include <tp/precision.hpp>
#include <tp/checkpoint/state_dict.hpp>
#include <tp/train_options.hpp>
