#pragma once
// The monitors (what trainer.put_scalar and the like reach: ScalarPrinter, JSONWriter,
// TensorBoardWriter) and the default callback set, tp::default_callbacks(logdir). They bring
// <regex>, nlohmann/json and libpng with them. See tp/tp.hpp.
#include <tp/callbacks/default_callbacks.hpp>
#include <tp/monitors/console.hpp>
#include <tp/monitors/json.hpp>
#include <tp/monitors/tensorboard.hpp>
