#pragma once
// Fashion-MNIST from its gzip IDX files (Debian's dataset-fashion-mnist installs them in
// /usr/share/datasets/fashion-mnist). The folder can be given, or set with the environment
// variable TP_FASHION_MNIST_DIR. Every failure names the file and says what to do.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include <torch/types.h>

namespace tp::data {

// The images as uint8 [N, 1, 28, 28] and the labels as int64 [N], in 0..9.
struct FashionMnist {
  torch::Tensor images;
  torch::Tensor labels;
  static constexpr const char* class_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
};

// Which of Fashion-MNIST's two sets to read: the 60,000 training images or the 10,000 test images.
enum class split { train, test };

// $TP_FASHION_MNIST_DIR if set, else Debian's folder.
inline std::filesystem::path fashion_mnist_dir() {
  if (const char* dir = std::getenv("TP_FASHION_MNIST_DIR"); dir != nullptr) {
    if (*dir == '\0' || !std::filesystem::is_directory(dir))
      throw std::runtime_error(std::string("tp::data: TP_FASHION_MNIST_DIR is set to '") + dir +
                               "', which is not a folder; point it at the folder holding the four "
                               "Fashion-MNIST *-ubyte.gz files, or unset it to use Debian's "
                               "/usr/share/datasets/fashion-mnist");
    return dir;
  }
  return "/usr/share/datasets/fashion-mnist";
}

namespace detail {

inline std::vector<std::uint8_t> read_gzip(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path))
    throw std::runtime_error("tp::data: " + path.string() + " does not exist; install Debian's "
                             "dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or "
                             "set TP_FASHION_MNIST_DIR to a folder holding the Fashion-MNIST files");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("tp::data: cannot open " + path.string());
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> chunk(1 << 20);
  for (;;) {
    const int got = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      int code = 0;
      const std::string why = gzerror(file, &code);
      gzclose(file);
      throw std::runtime_error("tp::data: " + path.string() + " is corrupt (zlib: " + why +
                               "); reinstall dataset-fashion-mnist");
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
  }
  gzclose(file);
  return bytes;
}

inline std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

}  // namespace detail

// Reads an IDX file of unsigned bytes (gzip-compressed or not: zlib reads both) whose number
// of dimensions is `expected_dims`, as a uint8 tensor of those dimensions.
inline torch::Tensor read_idx_ubyte(const std::filesystem::path& path, int expected_dims) {
  const auto bytes = detail::read_gzip(path);
  auto malformed = [&](const std::string& why) {
    return std::runtime_error("tp::data: " + path.string() + " is not a valid IDX file: " + why +
                              "; reinstall dataset-fashion-mnist or check TP_FASHION_MNIST_DIR");
  };
  if (bytes.size() < 4) throw malformed("it is shorter than the 4-byte IDX header");
  if (bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08)
    throw malformed("its magic number does not say 'unsigned bytes'");
  const int dims = bytes[3];
  if (dims != expected_dims)
    throw malformed("it has " + std::to_string(dims) + " dimensions, " + std::to_string(expected_dims) + " were expected");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(dims);
  if (bytes.size() < header) throw malformed("its header is truncated");
  std::vector<std::int64_t> sizes;
  std::size_t count = 1;
  for (int d = 0; d < dims; ++d) {
    sizes.push_back(detail::big_endian_u32(&bytes[4 + 4 * static_cast<std::size_t>(d)]));
    count *= static_cast<std::size_t>(sizes.back());
  }
  if (bytes.size() - header != count)
    throw malformed("the header announces " + std::to_string(count) + " bytes of data but the file holds " +
                    std::to_string(bytes.size() - header));
  return torch::from_blob(const_cast<std::uint8_t*>(bytes.data() + header), sizes, torch::kUInt8).clone();
}

// Reads one split from `dir` (default: fashion_mnist_dir()).
inline FashionMnist fashion_mnist(split which, const std::filesystem::path& dir = fashion_mnist_dir()) {
  const std::string prefix = which == split::train ? "train" : "t10k";
  const auto images_path = dir / (prefix + "-images-idx3-ubyte.gz");
  const auto labels_path = dir / (prefix + "-labels-idx1-ubyte.gz");
  torch::Tensor images = read_idx_ubyte(images_path, 3);
  torch::Tensor labels = read_idx_ubyte(labels_path, 1);
  if (images.size(0) != labels.size(0))
    throw std::runtime_error("tp::data: " + images_path.string() + " holds " + std::to_string(images.size(0)) +
                             " images but " + labels_path.string() + " holds " + std::to_string(labels.size(0)) +
                             " labels; the two files must come from the same split");
  if (images.size(0) == 0) throw std::runtime_error("tp::data: " + images_path.string() + " holds no image");
  if (images.size(1) != 28 || images.size(2) != 28)
    throw std::runtime_error("tp::data: " + images_path.string() + " holds images of " +
                             std::to_string(images.size(1)) + "x" + std::to_string(images.size(2)) +
                             " pixels; Fashion-MNIST images are 28x28");
  if (labels.max().item<int>() > 9)
    throw std::runtime_error("tp::data: " + labels_path.string() + " holds a label above 9; Fashion-MNIST has 10 classes");
  return {images.unsqueeze(1), labels.to(torch::kInt64)};
}

}  // namespace tp::data
