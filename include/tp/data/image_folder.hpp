#pragma once
// Image sources listed up front: a random-access, sized range of image_file (image/image_file.hpp),
// so that shuffle(seed) shuffles exactly and shard(rank, world_size) gives every rank its stride:
//
//   auto train = tp::data::image_folder("/data/train");      // torchvision's ImageFolder layout
//   auto flow = train | tp::data::shuffle(42) | tp::data::shard(env.rank, env.world_size)
//             | tp::data::decode_images(augment, /*threads=*/4, /*seed=*/7) | tp::data::batch(64);
//   train.classes();                                        // {"cat", "dog"}: label = index
//
//   auto listed = tp::data::list_file("/data/train.txt");   // lines `relative/path label`
//
// image_folder(root) lists as torchvision's ImageFolder does, so that labels and ids agree with
// a Python run on the same folder: the classes are root's subfolders in sorted order (label =
// index), and each class's images are every file below its folder (subfolders too) whose name
// ends in .jpg, .jpeg or .png (any case), sorted by (folder, name). An image's id is its index in
// that listing. list_file(path, root) reads `relative/path label` lines (the path may hold
// spaces: the label is the last field; # comments and blank lines skipped); paths are relative
// to `root`, by default the list file's folder; ids are the order of the lines.
//
// Both check everything at construction, so that a run does not fail an hour in: a missing
// folder, no class folders, an empty class folder, a list line that does not parse, a list
// naming a missing file. Each is a bad_file naming the path (and the list file's line).
// Listing touches no image: decoding happens later, in decode_images' threads.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <range/v3/range/concepts.hpp>

#include <tp/data/image/bad_file.hpp>
#include <tp/data/image/image_file.hpp>

namespace tp::data {

// The listing: shared, so that the copies shuffle and shard make of their source cost nothing.
class image_files : public ranges::view_base {
 public:
  using iterator = std::vector<image_file>::const_iterator;

  image_files() : files_(std::make_shared<const std::vector<image_file>>()), classes_(std::make_shared<const std::vector<std::string>>()) {}
  image_files(std::vector<image_file> files, std::vector<std::string> classes)
      : files_(std::make_shared<const std::vector<image_file>>(std::move(files))),
        classes_(std::make_shared<const std::vector<std::string>>(std::move(classes))) {}

  iterator begin() const { return files_->begin(); }
  iterator end() const { return files_->end(); }
  std::size_t size() const { return files_->size(); }
  const image_file& operator[](std::size_t i) const { return (*files_)[i]; }
  // The class names, label = index (image_folder; empty for a list file, whose labels are its own).
  const std::vector<std::string>& classes() const { return *classes_; }

 private:
  std::shared_ptr<const std::vector<image_file>> files_;
  std::shared_ptr<const std::vector<std::string>> classes_;
};

namespace detail {

inline bool image_extension(const std::filesystem::path& file) {
  auto ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

inline bool is_directory(const std::filesystem::path& p) {
  std::error_code error;
  return std::filesystem::is_directory(p, error);  // follows links, as torchvision's os.scandir does
}

// torchvision's make_dataset for one class: os.walk(followlinks=True) sorted by folder, then
// each folder's files sorted by name (strings compare as Python's do, by code point).
inline std::vector<std::string> images_below(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> found;  // (folder, name)
  std::error_code error;
  fs::recursive_directory_iterator it(folder, fs::directory_options::follow_directory_symlink, error), end;
  for (; !error && it != end; it.increment(error)) {
    std::error_code kind;
    if (fs::is_directory(it->path(), kind) || !image_extension(it->path())) continue;
    found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
  }
  if (error) throw bad_file(folder.string(), "cannot be listed: " + error.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  paths.reserve(found.size());
  for (auto& [dir, name] : found) paths.push_back((fs::path(dir) / name).string());
  return paths;
}

}  // namespace detail

inline image_files image_folder(const std::string& root) {
  namespace fs = std::filesystem;
  if (!fs::exists(root)) throw bad_file(root, "no such folder; image_folder needs one subfolder of images per class");
  if (!detail::is_directory(root)) throw bad_file(root, "is not a folder; image_folder needs one subfolder of images per class");
  std::vector<std::string> classes;
  std::error_code error;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error))
    if (detail::is_directory(it->path())) classes.push_back(it->path().filename().string());
  if (error) throw bad_file(root, "cannot be listed: " + error.message());
  if (classes.empty())
    throw bad_file(root, "holds no class folder; image_folder needs one subfolder of images per class (root/CLASS/NAME.jpg)");
  std::sort(classes.begin(), classes.end());

  std::vector<image_file> files;
  for (std::size_t label = 0; label < classes.size(); ++label) {
    const auto folder = fs::path(root) / classes[label];
    auto paths = detail::images_below(folder);
    if (paths.empty())
      throw bad_file(folder.string(), "class folder '" + classes[label] + "' holds no .jpg, .jpeg or .png file; remove it or add images");
    for (auto& path : paths)
      files.push_back({std::move(path), static_cast<std::int64_t>(label), static_cast<std::int64_t>(files.size()), {}});
  }
  return image_files(std::move(files), std::move(classes));
}

// The images a list file names, one `relative/path label` per line, relative to root (by default
// the list file's folder); ids are the order of the lines.
inline image_files list_file(const std::string& path, std::string root = "") {
  namespace fs = std::filesystem;
  if (root.empty()) root = fs::path(path).parent_path().string();
  std::ifstream in(path);
  if (!in) throw bad_file(path, "list file missing or unreadable");
  std::vector<image_file> files;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    auto where = [&] { return "line " + std::to_string(number) + ": "; };
    if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t");
    const auto split = line.find_last_of(" \t", last);
    if (split == std::string::npos || split < first)
      throw bad_file(path, where() + "expected `relative/path label`, got '" + line + "'");
    const auto label_text = line.substr(split + 1, last - split);
    std::int64_t label = -1;
    std::istringstream label_in(label_text);
    if (!(label_in >> label) || !label_in.eof() || label < 0 || !std::isdigit(static_cast<unsigned char>(label_text[0])))
      throw bad_file(path, where() + "the label '" + label_text + "' is not a class index (an integer >= 0)");
    const auto name = line.substr(first, line.find_last_not_of(" \t", split) + 1 - first);
    auto file = (fs::path(root) / name).string();
    std::error_code error;
    if (!fs::is_regular_file(file, error))
      throw bad_file(file, "missing (named by " + path + ", " + where().substr(0, where().size() - 2) + ")");
    files.push_back({std::move(file), label, static_cast<std::int64_t>(files.size()), {}});
  }
  if (in.bad()) throw bad_file(path, "could not be read to its end");
  if (files.empty()) throw bad_file(path, "names no image (lines `relative/path label`)");
  return image_files(std::move(files), {});
}

}  // namespace tp::data
