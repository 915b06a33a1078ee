#pragma once
// TensorBoardWriter: scalars, histograms, images and texts as TensorBoard event files
// (tensorpack's TFEventWriter), in `<folder>/events.out.tfevents.<seconds>.<host>`. Only the
// chief writes.
//
//   tp::TensorBoardWriter(logdir).config("batch 128, lr 1e-3")   also the run's configuration,
//                                                                 as a text, when training starts
//
// The file is a TFRecord stream: each record is its length (uint64, little-endian), the masked
// CRC-32C of the length, the data, and the masked CRC-32C of the data. Each record's data is a
// serialized tensorflow.Event: the first holds file_version "brain.Event:2", the others a
// Summary with one value, tagged with the global step: a simple_value (put_scalar), a
// HistogramProto (put_histogram: 30 equal buckets between the values' min and max), an Image
// with PNG bytes (put_image), or a string tensor for TensorBoard's text plugin (put_text). A
// resumed run starts its file with a SessionLog START at its first step, so TensorBoard drops
// the interrupted run's events from there on. The few protobuf fields needed are written here
// directly rather than through a protobuf dependency.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include <unistd.h>

#include <vector>

#include <torch/types.h>

#include <tp/io/crc32c.hpp>
#include <tp/monitors/detail/png.hpp>
#include <tp/io/writable_folder.hpp>

namespace tp {

namespace detail {
// Protobuf wire format: what an Event with a scalar needs.
inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
inline void put_tag(std::string& out, int field, int wire_type) { put_varint(out, static_cast<std::uint64_t>(field << 3 | wire_type)); }
template <class T>
void put_fixed(std::string& out, T value) {  // little-endian, as protobuf's fixed32/fixed64
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}
inline void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// tensorflow.Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
// Summary { repeated Value value = 1; }
// Value { string tag = 1; float simple_value = 2; Image image = 4; HistogramProto histo = 5;
//         TensorProto tensor = 8; SummaryMetadata metadata = 9; }
inline std::string event_header(double wall_time, std::int64_t step) {
  std::string out;
  put_tag(out, 1, 1);
  put_fixed(out, wall_time);
  put_tag(out, 2, 0);
  put_varint(out, static_cast<std::uint64_t>(step));
  return out;
}
inline std::string version_event(double wall_time) {
  auto out = event_header(wall_time, 0);
  put_bytes(out, 3, "brain.Event:2");
  return out;
}
// An Event whose summary holds one value: `fields` are the Value's fields after its tag.
inline std::string summary_event(double wall_time, std::int64_t step, std::string_view tag, std::string_view fields) {
  std::string value;
  put_bytes(value, 1, tag);
  value.append(fields);
  std::string summary;
  put_bytes(summary, 1, value);
  auto out = event_header(wall_time, step);
  put_bytes(out, 5, summary);
  return out;
}
inline std::string scalar_fields(float value) {
  std::string out;
  put_tag(out, 2, 5);
  put_fixed(out, value);
  return out;
}
inline void put_packed_doubles(std::string& out, int field, const std::vector<double>& values) {
  std::string packed;
  for (double v : values) put_fixed(packed, v);
  put_bytes(out, field, packed);
}
// HistogramProto { double min = 1; double max = 2; double num = 3; double sum = 4;
//   double sum_squares = 5; repeated double bucket_limit = 6; repeated double bucket = 7; }
// Bucket i counts the values in (limit[i-1], limit[i]]; the first bucket also takes the min.
// NaN and infinite values are left out (TensorBoard could not draw them).
inline std::string histogram_fields(const torch::Tensor& values, int buckets = 30) {
  auto v = values.detach().to(torch::kCPU, torch::kDouble).flatten();
  v = v.index({v.isfinite()});
  std::vector<double> limits, counts;
  double lo = 0, hi = 0, sum = 0, squares = 0;
  if (v.numel() > 0) {
    lo = v.min().item<double>(), hi = v.max().item<double>();
    sum = v.sum().item<double>(), squares = v.square().sum().item<double>();
    if (lo == hi) {
      limits = {hi};
      counts = {static_cast<double>(v.numel())};
    } else {
      const auto edges = torch::linspace(lo, hi, buckets + 1, torch::kDouble);
      const auto index = torch::searchsorted(edges.slice(0, 1, buckets), v, /*out_int32=*/false, /*right=*/false);
      const auto histogram = torch::bincount(index, {}, buckets).to(torch::kDouble).contiguous();
      const auto upper = edges.slice(0, 1).contiguous();
      limits.assign(upper.data_ptr<double>(), upper.data_ptr<double>() + buckets);
      counts.assign(histogram.data_ptr<double>(), histogram.data_ptr<double>() + buckets);
      limits.back() = hi;
    }
  }
  std::string histo;
  for (int field = 1; const double x : {lo, hi, static_cast<double>(v.numel()), sum, squares}) {
    put_tag(histo, field++, 1);
    put_fixed(histo, x);
  }
  put_packed_doubles(histo, 6, limits);
  put_packed_doubles(histo, 7, counts);
  std::string out;
  put_bytes(out, 5, histo);
  return out;
}
// Image { int32 height = 1; int32 width = 2; int32 colorspace = 3; bytes encoded_image_string = 4; }
// `pixels`: [H, W, C] uint8 (monitors/detail/image.hpp).
inline std::string image_fields(const torch::Tensor& pixels) {
  std::string image;
  for (int field = 1; const auto x : {pixels.size(0), pixels.size(1), pixels.size(2)}) {
    put_tag(image, field++, 0);
    put_varint(image, static_cast<std::uint64_t>(x));
  }
  put_bytes(image, 4, encode_png(pixels));
  std::string out;
  put_bytes(out, 4, image);
  return out;
}
// The text plugin's value: SummaryMetadata { PluginData plugin_data = 1 { string plugin_name = 1; } }
// and TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2 (a
// scalar: empty); repeated bytes string_val = 8; }.
inline std::string text_fields(std::string_view text) {
  std::string plugin, metadata, tensor, out;
  put_bytes(plugin, 1, "text");
  put_bytes(metadata, 1, plugin);
  put_tag(tensor, 1, 0);
  put_varint(tensor, 7);
  put_bytes(tensor, 2, "");
  put_bytes(tensor, 8, text);
  put_bytes(out, 8, tensor);
  put_bytes(out, 9, metadata);
  return out;
}

// An Event with session_log { status: START } (Event field 7, SessionLog field 1): written when
// a run resumes at `step`, it tells TensorBoard to drop what an earlier run logged at that step
// or later (it will be logged again), so the curves do not fold back on themselves.
inline std::string session_start_event(double wall_time, std::int64_t step) {
  auto out = event_header(wall_time, step);
  std::string session_log;
  put_tag(session_log, 1, 0);
  put_varint(session_log, 1);  // SessionLog.START
  put_bytes(out, 7, session_log);
  return out;
}

inline std::string tfrecord(std::string_view data) {
  std::string out;
  const std::uint64_t length = data.size();
  put_fixed(out, length);
  put_fixed(out, masked_crc32c(out.data(), sizeof length));
  out.append(data);
  put_fixed(out, masked_crc32c(data.data(), data.size()));
  return out;
}
}  // namespace detail

class TensorBoardWriter {
 public:
  static constexpr bool chief_only = true;

  explicit TensorBoardWriter(std::filesystem::path folder) : folder_(std::move(folder)) {}
  TensorBoardWriter(TensorBoardWriter&& other) noexcept
      : folder_(std::move(other.folder_)), path_(std::move(other.path_)), config_(std::move(other.config_)), file_(other.file_) {
    other.file_ = nullptr;
  }
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter() { close(); }

  template <class Trainer>
  void before_train(Trainer& trainer) {
    if (file_) return;
    detail::make_writable_folder(folder_, "tp::TensorBoardWriter: the log folder");
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    path_ = folder_ / ("events.out.tfevents." + std::to_string(seconds) + "." + host);
    file_ = std::fopen(path_.c_str(), "ab");
    if (!file_) throw std::runtime_error("tp::TensorBoardWriter: cannot open " + path_.string() + " for writing");
    write(detail::version_event(now()));
    if (trainer.global_step() > 0) write(detail::session_start_event(now(), trainer.global_step()));  // a resumed run
    if (!config_.empty()) on_text(trainer, "config", config_);
  }
  template <class Trainer>
  void on_scalar(Trainer& trainer, std::string_view name, double value) {
    if (file_) write(detail::summary_event(now(), trainer.global_step(), name, detail::scalar_fields(static_cast<float>(value))));
  }
  template <class Trainer>
  void on_histogram(Trainer& trainer, std::string_view name, const torch::Tensor& values) {
    if (file_) write(detail::summary_event(now(), trainer.global_step(), name, detail::histogram_fields(values)));
  }
  template <class Trainer>
  void on_image(Trainer& trainer, std::string_view name, const torch::Tensor& pixels) {
    if (file_) write(detail::summary_event(now(), trainer.global_step(), name, detail::image_fields(pixels)));
  }
  template <class Trainer>
  void on_text(Trainer& trainer, std::string_view name, std::string_view text) {
    if (file_) write(detail::summary_event(now(), trainer.global_step(), name, detail::text_fields(text)));
  }

  // The run's configuration (Markdown), written as the text "config" when training starts.
  TensorBoardWriter& config(std::string text) & {
    config_ = std::move(text);
    return *this;
  }
  TensorBoardWriter&& config(std::string text) && { return std::move(config(std::move(text))); }
  // Flushed every epoch, so TensorBoard shows an epoch as soon as it ends.
  template <class Trainer>
  void after_epoch(Trainer&) {
    if (file_) std::fflush(file_);
  }
  template <class Trainer>
  void after_train(Trainer&) {
    close();
  }

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  static double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
  void write(const std::string& data) {
    const auto record = detail::tfrecord(data);
    if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
      throw std::runtime_error("tp::TensorBoardWriter: writing " + path_.string() + " failed (disk full?)");
  }
  void close() {
    if (file_) std::fclose(file_);
    file_ = nullptr;
  }

  std::filesystem::path folder_, path_;
  std::string config_;
  std::FILE* file_ = nullptr;
};

}  // namespace tp
