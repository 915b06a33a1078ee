#pragma once
// The log folder of a run (tensorpack's logger.set_logger_dir): what to do when it already
// holds an earlier run.
//
//   keep      use it as it is: savers resume from its checkpoints, monitors continue its files
//             (the default: running the same command again continues the run)
//   backup    rename it to <folder>-backup-<time> and start afresh in an empty one
//   remove    delete it and start afresh (only when asked: nothing is deleted by default)
//   new_dir   leave it alone and log into a new <folder>-<time>
//   ask       ask on the terminal; without one (CI, a batch job), keep
//
// The environment variable TP_LOGDIR_ACTION (keep, backup, remove, new_dir) overrides the
// choice, so that a launcher can decide without changing the program.
//
//   const auto logdir = tp::log_dir("train_log/fashion", tp::if_exists::keep);
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include <tp/distributed/environment.hpp>
#include <tp/io/writable_folder.hpp>

namespace tp {

// What tp::log_dir does with a folder that holds an earlier run: keep it, back it up, remove it,
// log into a new one, or ask.
enum class if_exists { keep, backup, remove, new_dir, ask };

namespace detail {
inline if_exists parse_if_exists(const std::string& text, const std::string& where) {
  if (text == "keep" || text == "k") return if_exists::keep;
  if (text == "backup" || text == "b") return if_exists::backup;
  if (text == "remove" || text == "delete" || text == "d") return if_exists::remove;
  if (text == "new_dir" || text == "new" || text == "n") return if_exists::new_dir;
  throw std::invalid_argument("tp::log_dir: " + where + " is '" + text + "'; use keep, backup, remove or new_dir");
}

inline std::string timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  ::localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &local);
  return text;
}

// `base` + suffix, with -2, -3, ... until the name is free.
inline std::filesystem::path free_name(const std::filesystem::path& base, const std::string& suffix) {
  std::filesystem::path candidate = base.string() + suffix;
  for (int i = 2; std::filesystem::exists(candidate); ++i) candidate = base.string() + suffix + "-" + std::to_string(i);
  return candidate;
}
}  // namespace detail

// Prepares the log folder and returns the one to use (created, possibly a new one).
inline std::filesystem::path log_dir(std::filesystem::path folder, if_exists action = if_exists::keep, std::ostream& log = std::cerr) {
  if (folder.empty()) throw std::invalid_argument("tp::log_dir: the folder's name is empty");
  if (const char* env = std::getenv("TP_LOGDIR_ACTION"); env && *env)
    action = detail::parse_if_exists(env, "the environment variable TP_LOGDIR_ACTION");
  if (std::filesystem::exists(folder) && !std::filesystem::is_directory(folder))
    throw std::invalid_argument("tp::log_dir: " + folder.string() + " exists and is not a folder");
  if (const auto pe = read_process_environment(); pe.world_size > 1) {
    // One decision for the whole run: rank 0 acts, the others use the folder as rank 0 leaves it
    // (they read it only after rank 0 has chosen a checkpoint; see ModelSaver). They do not touch
    // it here, where rank 0 may be removing or renaming it: the probe file of the writability
    // check, made by rank 1 in a folder that rank 0's remove_all was emptying, made that fail
    // ("cannot remove all: No such file or directory"). Their savers and monitors check the
    // folder before training, once the ranks have met, after rank 0 is done with it.
    if (action == if_exists::new_dir)
      throw std::invalid_argument("tp::log_dir: new_dir cannot be used with several processes (each would pick its own folder); use "
                                  "backup or remove, or give each run its own folder");
    if (pe.rank != 0) return folder;
    if (action == if_exists::ask) action = if_exists::keep;  // rank 0's terminal is the launcher's
  }
  const bool has_run = std::filesystem::is_directory(folder) && !std::filesystem::is_empty(folder);
  if (has_run && action == if_exists::ask) {
    if (::isatty(STDIN_FILENO)) {
      log << "tp: log folder " << folder.string() << " holds an earlier run. [k]eep (resume), [b]ackup, [d]elete, [n]ew folder, [q]uit? "
          << std::flush;
      std::string answer;
      std::getline(std::cin, answer);
      if (answer == "q" || answer == "quit") throw std::runtime_error("tp::log_dir: quit at the user's request");
      action = detail::parse_if_exists(answer, "the answer");
    } else {
      log << "tp: log folder " << folder.string() << " holds an earlier run; no terminal to ask on, so it is kept (resume)\n";
      action = if_exists::keep;
    }
  }
  if (has_run) {
    switch (action) {
      case if_exists::backup: {
        const auto backup = detail::free_name(folder, "-backup-" + detail::timestamp());
        std::filesystem::rename(folder, backup);
        log << "tp: moved the earlier run in " << folder.string() << " to " << backup.string() << "\n";
        break;
      }
      case if_exists::remove:
        std::filesystem::remove_all(folder);
        log << "tp: deleted the earlier run in " << folder.string() << "\n";
        break;
      case if_exists::new_dir:
        folder = detail::free_name(folder, "-" + detail::timestamp());
        log << "tp: logging into a new folder, " << folder.string() << "\n";
        break;
      case if_exists::keep:
      case if_exists::ask:
        break;
    }
  }
  detail::make_writable_folder(folder, "tp::log_dir: the log folder");
  return folder;
}

}  // namespace tp
