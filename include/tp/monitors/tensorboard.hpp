#pragma once
// TensorBoardWriter: scalars as TensorBoard event files (tensorpack's TFEventWriter), in
// `<folder>/events.out.tfevents.<seconds>.<host>`. Only the chief writes.
//
// The file is a TFRecord stream: each record is its length (uint64, little-endian), the masked
// CRC-32C of the length, the data, and the masked CRC-32C of the data. Each record's data is a
// serialized tensorflow.Event: the first holds file_version "brain.Event:2", the others a
// Summary with one simple_value per scalar, tagged with the global step. A resumed run starts
// its file with a SessionLog START at its first step, so TensorBoard drops the interrupted run's
// events from there on. The few protobuf fields
// needed are written here directly rather than through a protobuf dependency.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include <unistd.h>

#include <tp/detail/crc32c.hpp>
#include <tp/detail/writable_folder.hpp>

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
// Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
inline std::string event(double wall_time, std::int64_t step, std::string_view file_version, std::string_view tag, float value) {
  std::string out;
  put_tag(out, 1, 1);
  put_fixed(out, wall_time);
  put_tag(out, 2, 0);
  put_varint(out, static_cast<std::uint64_t>(step));
  if (!file_version.empty()) {
    put_bytes(out, 3, file_version);
  } else {
    std::string value_message;
    put_bytes(value_message, 1, tag);
    put_tag(value_message, 2, 5);
    put_fixed(value_message, value);
    std::string summary;
    put_bytes(summary, 1, value_message);
    put_bytes(out, 5, summary);
  }
  return out;
}

// An Event with session_log { status: START } (Event field 7, SessionLog field 1): written when
// a run resumes at `step`, it tells TensorBoard to drop what an earlier run logged at that step
// or later (it will be logged again), so the curves do not fold back on themselves.
inline std::string session_start_event(double wall_time, std::int64_t step) {
  std::string out;
  put_tag(out, 1, 1);
  put_fixed(out, wall_time);
  put_tag(out, 2, 0);
  put_varint(out, static_cast<std::uint64_t>(step));
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
  TensorBoardWriter(TensorBoardWriter&& other) noexcept : folder_(std::move(other.folder_)), path_(std::move(other.path_)), file_(other.file_) {
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
    write(detail::event(now(), 0, "brain.Event:2", {}, 0));
    if (trainer.global_step() > 0) write(detail::session_start_event(now(), trainer.global_step()));  // a resumed run
  }
  template <class Trainer>
  void on_scalar(Trainer& trainer, std::string_view name, double value) {
    if (file_) write(detail::event(now(), trainer.global_step(), {}, name, static_cast<float>(value)));
  }
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
  std::FILE* file_ = nullptr;
};

}  // namespace tp
