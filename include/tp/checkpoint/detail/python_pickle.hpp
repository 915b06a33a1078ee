#pragma once
// Reads what Python's torch.save writes (PyTorch >= 1.6: a zip of data.pkl, a pickle of protocol
// 2, and data/<key>, one record per storage) into a small tree of values, without Python.
// LibTorch's torch::pickle_load cannot: it stops at SETITEM, APPEND and the OrderedDict
// `_metadata` that every torch.save(model.state_dict()) holds.
//
// The file is untrusted: every read is bounds-checked, nothing recurses on the file's depth, and
// whatever is wrong throws checkpoint_error naming the file and the byte. Globals this reader
// does not know (Lightning's AttributeDict, argparse.Namespace, numpy scalars) become opaque
// objects, not errors, so that the tensors and dicts around them still read. torch_save_bytes,
// at the end, writes such files.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/compiled_part.hpp>
#include <tp/io/whole_file.hpp>

namespace tp::detail {

// A Python value as torch.save wrote it. Containers have reference semantics (shared_ptr), as
// Python's do, because the pickle memo shares them before they are filled. An object (of a class
// this reader does not know) keeps its class's name, and as items and entries what a list or
// dict subclass pickles and its attributes, so that a Namespace or AttributeDict reads like a dict.
struct py_value {
  enum class kind { none, boolean, integer, real, string, bytes, list, tuple, dict, tensor, object };
  using list_type = std::vector<py_value>;
  using dict_type = std::vector<std::pair<py_value, py_value>>;

  py_value() = default;
  py_value(const py_value&) = default;
  py_value(py_value&&) noexcept = default;
  py_value& operator=(const py_value&) = default;
  py_value& operator=(py_value&&) noexcept = default;
  ~py_value() { release(); }

  kind type() const { return kind_; }
  bool is_none() const { return kind_ == kind::none; }
  bool is_dict() const { return kind_ == kind::dict; }
  bool is_tensor() const { return kind_ == kind::tensor; }
  bool is_object() const { return kind_ == kind::object; }

  // Each throws checkpoint_error ("expected an int, found a str") for another kind.
  bool as_bool() const { return expect(kind::boolean, "a bool").int_ != 0; }
  std::int64_t as_int() const { return expect(kind::integer, "an int").int_; }
  double as_double() const { return kind_ == kind::integer ? static_cast<double>(int_) : expect(kind::real, "a float").real_; }
  const std::string& as_string() const { return expect(kind::string, "a str").text_; }
  const std::string& as_bytes() const { return expect(kind::bytes, "bytes").text_; }
  const torch::Tensor& tensor() const { return expect(kind::tensor, "a tensor").tensor_; }
  const std::string& object_name() const { return expect(kind::object, "an object").text_; }  // "argparse.Namespace"
  const list_type& items() const {  // a list's, tuple's or set's
    if (kind_ != kind::list && kind_ != kind::tuple && kind_ != kind::object) mismatch("a list or tuple");
    return *items_;
  }
  const dict_type& entries() const {  // in insertion order
    if (kind_ != kind::dict && kind_ != kind::object) mismatch("a dict");
    return *entries_;
  }
  // The value under a str key, or nullptr; the last one, as in Python, should a damaged file
  // repeat a key.
  const py_value* find(std::string_view key) const {
    const auto& all = entries();
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (it->first.kind_ == kind::string && it->first.text_ == key) return &it->second;
    return nullptr;
  }

  // For messages: "a dict of 3 entries", "a tensor Float[2, 3]", "an argparse.Namespace object".
  std::string describe() const {
    static const char* const simple[] = {"None", "a bool", "an int", "a float", "a str", "bytes"};
    const auto count = [](std::size_t n, const char* one, const char* many) { return std::to_string(n) + (n == 1 ? one : many); };
    switch (kind_) {
      case kind::list: return "a list of " + count(items_->size(), " item", " items");
      case kind::tuple: return "a tuple of " + count(items_->size(), " item", " items");
      case kind::dict: return "a dict of " + count(entries_->size(), " entry", " entries");
      case kind::tensor: return "a tensor " + c10::str(tensor_.scalar_type(), tensor_.sizes());
      case kind::object: return (std::string_view("aeiou").find(text_[0]) == std::string_view::npos ? "a " : "an ") + text_ + " object";
      default: return simple[static_cast<int>(kind_)];
    }
  }

 private:
  friend class python_unpickler;

  const py_value& expect(kind k, const char* what) const {
    if (kind_ != k) mismatch(what);
    return *this;
  }
  [[noreturn]] void mismatch(const char* what) const {
    throw checkpoint_error(std::string("expected ") + what + ", found " + describe());
  }
  const void* id() const { return items_ ? static_cast<const void*>(items_.get()) : entries_.get(); }  // a container's identity

  // Frees nested containers with a work list, not recursion: a damaged file may nest them a
  // million deep.
  void release() noexcept {
    if (!items_ && !entries_) return;
    std::vector<py_value> doomed;
    auto take = [&doomed](py_value& v) {
      if (v.items_ && v.items_.use_count() == 1) {
        for (auto& x : *v.items_) doomed.push_back(std::move(x));
        v.items_->clear();
      }
      if (v.entries_ && v.entries_.use_count() == 1) {
        for (auto& [k, x] : *v.entries_) doomed.push_back(std::move(k)), doomed.push_back(std::move(x));
        v.entries_->clear();
      }
    };
    take(*this);
    while (!doomed.empty()) {
      py_value v = std::move(doomed.back());
      doomed.pop_back();
      take(v);
    }
  }

  kind kind_ = kind::none;
  std::int64_t int_ = 0;  // also a bool
  double real_ = 0;
  std::string text_;  // a str (UTF-8), bytes, an object's class
  std::shared_ptr<list_type> items_;  // a list's, tuple's, object's
  std::shared_ptr<dict_type> entries_;  // a dict's, object's
  torch::Tensor tensor_;
};

// Reads a torch.save file from bytes already in memory; `name` (the file's) starts every error.
TP_DECL py_value read_torch_save(const std::string& bytes, const std::string& name);
TP_DECL py_value read_torch_save(const std::filesystem::path& path);

// The bytes torch.save would write for `value` (dicts, lists, tuples, numbers, strings, tensors).
// LibTorch's pickle_save tags every dict and list with torch.jit._pickle.restore_type_tag, a
// global that PyTorch 2.6's torch.load (weights_only by default) refuses; this pickler writes
// them untagged, as Python's own pickler does. Lists must be lists of Any (GenericList with
// AnyType): a c10::List<int64_t>, <double>, <bool> or <Tensor> pickles through
// torch.jit._pickle.build_intlist and its kin, refused the same way.
TP_DECL std::vector<char> torch_save_bytes(const c10::IValue& value);

// A value read from a file as LibTorch's IValue (a tp::state_tree's values): dicts keyed by str
// (or by int, as torch.optim keys its state), lists, tuples, numbers, strings, None and tensors.
// Anything else (bytes, an object of a class this reader does not know), or a nesting deeper
// than 64, is a checkpoint_error naming `path`, the value's place.
TP_DECL c10::IValue to_ivalue(const py_value& value, const std::string& path);

}  // namespace tp::detail

#if TP_DEFINE_COMPILED_PART
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include <optional>

#include <c10/core/CPUAllocator.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <tp/checkpoint/detail/zip_records.hpp>

namespace tp::detail {

// Runs data.pkl's opcodes on a stack, as Python's pickle does, with storages from the zip.
class python_unpickler {
  using kind = py_value::kind;
  using list_type = py_value::list_type;

 public:
  python_unpickler(std::string_view pickle, const std::string& name, const zip_records& zip)
      : in_(pickle), name_(name), zip_(zip) {}

  py_value read() {
    try {
      auto result = run();
      collect(&result);
      return result;
    } catch (...) {
      collect(nullptr);
      throw;
    }
  }

 private:
  py_value run() {
    for (;;) {
      at_ = pos_;
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: if (le(1) > 5) fail("it uses a pickle protocol newer than 5"); break;  // PROTO
        case 0x95: take(8); break;  // FRAME: only a length hint
        case '.': return pop();  // STOP
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0': if (stack_.size() > floor()) stack_.pop_back(); else pop_mark(); break;  // POP
        case '1': pop_mark(); break;  // POP_MARK
        case '2': { py_value v = top(); push(std::move(v)); break; }  // DUP
        case 'N': push({}); break;
        case 0x88: case 0x89: push(make(kind::boolean, op == 0x88)); break;  // NEWTRUE, NEWFALSE
        case 'J': push(make(kind::integer, static_cast<std::int32_t>(le(4)))); break;  // BININT
        case 'K': case 'M': push(make(kind::integer, static_cast<std::int64_t>(le(op == 'K' ? 1 : 2)))); break;  // BININT1, 2
        case 0x8a: case 0x8b: push(make(kind::integer, long_bytes(le(op == 0x8a ? 1 : 4)))); break;  // LONG1, LONG4
        case 'I': case 'L': {  // INT, LONG: decimal text; INT's 01 and 00 are True and False
          auto text = line();
          if (op == 'I' && (text == "01" || text == "00")) push(make(kind::boolean, text == "01"));
          else push(make(kind::integer, number<std::int64_t>(text.ends_with('L') ? text.substr(0, text.size() - 1) : text)));
          break;
        }
        case 'F': { auto v = make(kind::real); v.real_ = number<double>(line()); push(std::move(v)); break; }  // FLOAT
        case 'G': { auto v = make(kind::real); v.real_ = std::bit_cast<double>(be8()); push(std::move(v)); break; }  // BINFLOAT
        case 0x8c: case 'U': push(text(kind::string, take(le(1)))); break;  // SHORT_BINUNICODE, SHORT_BINSTRING
        case 'X': case 'T': push(text(kind::string, take(le(4)))); break;  // BINUNICODE, BINSTRING
        case 0x8d: push(text(kind::string, take(le(8)))); break;  // BINUNICODE8
        case 'C': push(text(kind::bytes, take(le(1)))); break;  // SHORT_BINBYTES
        case 'B': push(text(kind::bytes, take(le(4)))); break;  // BINBYTES
        case 0x8e: case 0x96: push(text(kind::bytes, take(le(8)))); break;  // BINBYTES8, BYTEARRAY8
        case ']': case 0x8f: push(make(kind::list)); break;  // EMPTY_LIST, EMPTY_SET (a set reads as a list)
        case 'a': { auto v = pop(); append(top(), {std::move(v)}); break; }  // APPEND
        case 'e': case 0x90: { auto items = pop_mark(); append(top(), std::move(items)); break; }  // APPENDS, ADDITEMS
        case 'l': case 0x91: push(sequence(kind::list, pop_mark())); break;  // LIST, FROZENSET
        case ')': push(make(kind::tuple)); break;  // EMPTY_TUPLE
        case 't': push(sequence(kind::tuple, pop_mark())); break;  // TUPLE
        case 0x85: case 0x86: case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
          const std::size_t n = op - 0x84u;
          if (stack_.size() < floor() + n) fail("it makes a tuple of " + std::to_string(n) + " items from fewer");
          push(sequence(kind::tuple, pop_from(stack_.size() - n)));
          break;
        }
        case '}': push(make(kind::dict)); break;  // EMPTY_DICT
        case 'd': { auto v = make(kind::dict); set_items(v, pop_mark()); push(std::move(v)); break; }  // DICT
        case 's': { auto v = pop(), k = pop(); set_items(top(), {std::move(k), std::move(v)}); break; }  // SETITEM
        case 'u': { auto items = pop_mark(); set_items(top(), std::move(items)); break; }  // SETITEMS
        case 'c': { const auto module = line(); push(global(module, line())); break; }  // GLOBAL
        case 0x93: {  // STACK_GLOBAL
          const auto name = pop(), module = pop();
          if (module.kind_ != kind::string || name.kind_ != kind::string) fail("a global's module or name is not a str");
          push(global(module.text_, name.text_));
          break;
        }
        case 0x92: pop(); [[fallthrough]];  // NEWOBJ_EX: its keyword arguments do not matter here
        case 'R': case 0x81: { auto args = pop(), callable = pop(); push(call(callable, args, false)); break; }  // REDUCE, NEWOBJ
        case 'b': { auto state = pop(); build(top(), state); break; }  // BUILD
        case 'q': case 'r': { const auto i = le(op == 'q' ? 1 : 4); memo_[i] = top(); break; }  // BINPUT, LONG_BINPUT
        case 'p': { const auto i = number<std::uint64_t>(line()); memo_[i] = top(); break; }  // PUT
        case 0x94: { const auto i = memo_.size(); memo_[i] = top(); break; }  // MEMOIZE
        case 'h': case 'j': push(memo(le(op == 'h' ? 1 : 4))); break;  // BINGET, LONG_BINGET
        case 'g': push(memo(number<std::uint64_t>(line()))); break;  // GET
        case 'Q': { auto id = pop(); push(persistent(id)); break; }  // BINPERSID
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("it uses pickle opcode ") + hex + ", which this reader does not support (the file is damaged, or not " +
               "written by torch.save); save it again with torch.save(obj, path)");
        }
      }
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw checkpoint_error(name_ + ": data.pkl cannot be read at byte " + std::to_string(at_) + ": " + what);
  }

  std::string_view take(std::uint64_t n) {
    if (n > in_.size() - pos_) fail("the pickle ends early (the file is truncated or damaged)");
    pos_ += n;
    return in_.substr(pos_ - n, n);
  }
  std::uint64_t le(std::size_t n) {  // unsigned, n <= 8 bytes
    const auto bytes = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = v << 8 | static_cast<unsigned char>(bytes[i]);
    return v;
  }
  std::uint64_t be8() {
    std::uint64_t v = 0;
    for (const char c : take(8)) v = v << 8 | static_cast<unsigned char>(c);
    return v;
  }
  std::int64_t long_bytes(std::uint64_t n) {  // little-endian two's complement
    if (n > 8) fail("an integer is wider than 64 bits");
    if (n == 0) return 0;
    const int shift = 64 - 8 * static_cast<int>(n);  // sign-extends from the top byte
    return static_cast<std::int64_t>(le(n) << shift) >> shift;
  }
  std::string_view line() {  // the text opcodes' argument, up to '\n'
    const auto end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("the pickle ends early (the file is truncated or damaged)");
    const auto text = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return text;
  }
  template <class T>
  T number(std::string_view text) {
    T v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) fail("'" + std::string(text.substr(0, 40)) + "' is not a number");
    return v;
  }

  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }  // a MARK hides what lies below it
  void push(py_value v) { stack_.push_back(std::move(v)); }
  py_value& top() {
    if (stack_.size() <= floor()) fail("it takes a value from an empty stack");
    return stack_.back();
  }
  py_value pop() {
    py_value v = std::move(top());
    stack_.pop_back();
    return v;
  }
  list_type pop_from(std::size_t start) {
    list_type items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(start)), std::make_move_iterator(stack_.end()));
    stack_.resize(start);
    return items;
  }
  list_type pop_mark() {
    if (marks_.empty()) fail("it needs a MARK that is missing");
    const auto start = marks_.back();
    marks_.pop_back();
    return pop_from(start);
  }
  py_value memo(std::uint64_t index) {
    const auto found = memo_.find(index);
    if (found == memo_.end()) fail("it refers to memo entry " + std::to_string(index) + ", which was never stored");
    return found->second;
  }

  // Every container is made here, and kept in made_ for collect().
  py_value make(kind k, std::int64_t i = 0) {
    py_value v;
    v.kind_ = k;
    v.int_ = i;
    if (k == kind::list || k == kind::tuple || k == kind::object) v.items_ = std::make_shared<list_type>();
    if (k == kind::dict || k == kind::object) v.entries_ = std::make_shared<py_value::dict_type>();
    if (v.items_ || v.entries_) made_.push_back(v);
    return v;
  }
  py_value text(kind k, std::string_view s) {
    auto v = make(k);
    v.text_ = s;
    return v;
  }
  py_value global(std::string_view module, std::string_view name) {  // protocols 1 and 2 spell modules as Python 2 did
    const std::string_view python3 = module == "__builtin__" ? "builtins" : module == "copy_reg" ? "copyreg" : module;
    return text(kind::object, std::string(python3) + "." + std::string(name));
  }
  py_value sequence(kind k, list_type items) {
    auto v = make(k);
    *v.items_ = std::move(items);
    return v;
  }
  void append(py_value& target, list_type items) {
    if (target.kind_ != kind::list && target.kind_ != kind::object) fail("it appends to " + target.describe());
    for (auto& x : items) target.items_->push_back(std::move(x));
  }
  void set_items(py_value& target, list_type items) {  // key, value, key, value, ...
    if (target.kind_ != kind::dict && target.kind_ != kind::object) fail("it sets an item of " + target.describe());
    if (items.size() % 2 != 0) fail("a dict has a key without a value");
    for (std::size_t i = 0; i < items.size(); i += 2) target.entries_->emplace_back(std::move(items[i]), std::move(items[i + 1]));
  }
  // BUILD: an object keeps a dict state (its attributes) as entries. A dict's state (an
  // OrderedDict's _metadata) and anything else's are not needed.
  void build(py_value& target, const py_value& state) {
    if (target.kind_ != kind::object) return;
    auto add = [&](const py_value& s) {
      if (s.kind_ == kind::dict) target.entries_->insert(target.entries_->end(), s.entries_->begin(), s.entries_->end());
    };
    if (state.kind_ == kind::tuple && state.items_->size() == 2) {  // (dict state, slot state)
      add((*state.items_)[0]);
      add((*state.items_)[1]);
    } else {
      add(state);
    }
  }

  const py_value& arg(const list_type& args, std::size_t i, kind k, const std::string& what) {
    if (i >= args.size() || args[i].kind_ != k) fail(what + " is missing or of the wrong kind");
    return args[i];
  }
  std::vector<std::int64_t> ints(const list_type& args, std::size_t i, const std::string& what) {
    std::vector<std::int64_t> all;
    for (const auto& x : arg(args, i, kind::tuple, what).items())
      all.push_back(x.kind_ == kind::integer ? x.int_ : (fail(what + " is not a tuple of ints"), 0));
    return all;
  }

  // REDUCE and NEWOBJ: what the callables torch.save uses make; any other makes an opaque object
  // named after it. `nested` stops _rebuild_from_type_v2 from unwrapping itself without end.
  py_value call(const py_value& callable, const py_value& args, bool nested) {
    if (callable.kind_ != kind::object) fail("it calls " + callable.describe() + ", which is not a class or function");
    if (args.kind_ != kind::tuple) fail("the arguments of " + callable.text_ + " are not a tuple");
    const std::string& f = callable.text_;
    const auto& a = *args.items_;
    if (f == "collections.OrderedDict" || f == "builtins.dict") return make(kind::dict);  // its items follow, by SETITEMS
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") return rebuild_tensor(a);
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state")
      return arg(a, 0, kind::tensor, "a parameter's data");
    if (f == "torch._tensor._rebuild_from_type_v2" && !nested)  // (function, subclass, arguments, state)
      return call(arg(a, 0, kind::object, "a rebuild function"), arg(a, 2, kind::tuple, "a rebuild's arguments"), true);
    if (f == "torch.Size" || f == "builtins.set" || f == "builtins.frozenset" || f == "builtins.list" || f == "builtins.tuple")
      return sequence(f == "torch.Size" || f == "builtins.tuple" ? kind::tuple : kind::list,
                      !a.empty() && (a[0].kind_ == kind::list || a[0].kind_ == kind::tuple) ? *a[0].items_ : list_type{});
    if (f == "torch.device") {  // as its text: "cuda:1"
      auto device = arg(a, 0, kind::string, "a device's type").text_;
      if (a.size() > 1 && a[1].kind_ == kind::integer) device += ":" + std::to_string(a[1].int_);
      return text(kind::string, device);
    }
    if (f == "copyreg._reconstructor") {  // protocol 1's objects: (class, base, the base's state)
      auto v = text(kind::object, arg(a, 0, kind::object, "a class").text_);
      if (a.size() > 2) build(v, a[2]);
      return v;
    }
    if (f.starts_with("torch.jit._pickle.") && !a.empty()) return a[0];  // LibTorch's restore_type_tag, build_intlist, ...
    if (f == "builtins.bytes" && a.empty()) return make(kind::bytes);
    if (f == "_codecs.encode" && a.size() == 2 && a[0].kind_ == kind::string) return latin1(a[0].text_);  // protocol 2's bytes
    return text(kind::object, f);
  }
  py_value latin1(std::string_view utf8) {  // code points below 256 back to the bytes they were
    auto v = make(kind::bytes);
    for (std::size_t i = 0; i < utf8.size(); ++i) {
      const auto c = static_cast<unsigned char>(utf8[i]);
      if (c < 0x80) v.text_ += static_cast<char>(c);
      else if ((c == 0xc2 || c == 0xc3) && i + 1 < utf8.size() && (static_cast<unsigned char>(utf8[i + 1]) & 0xc0) == 0x80)
        v.text_ += static_cast<char>((c & 3) << 6 | (static_cast<unsigned char>(utf8[++i]) & 0x3f));
      else fail("bytes encoded as text hold a character above 255");
    }
    return v;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, ...): a view of the storage, checked to lie
  // inside it. (requires_grad and hooks are dropped: these are values to copy into a model.)
  py_value rebuild_tensor(const list_type& a) {
    const auto& storage = arg(a, 0, kind::tensor, "a tensor's storage").tensor_;
    const auto offset = arg(a, 1, kind::integer, "a tensor's storage offset").int_;
    const auto size = ints(a, 2, "a tensor's size"), stride = ints(a, 3, "a tensor's stride");
    const auto elements = static_cast<std::int64_t>(storage.storage().nbytes() / storage.element_size());
    const bool empty = std::find(size.begin(), size.end(), 0) != size.end();
    bool inside = size.size() == stride.size() && offset >= 0 && offset <= elements;
    std::int64_t last = offset, step = 0;
    for (std::size_t i = 0; inside && i < size.size(); ++i)
      inside = size[i] >= 0 && stride[i] >= 0 &&
               (empty || (!__builtin_mul_overflow(size[i] - 1, stride[i], &step) && !__builtin_add_overflow(last, step, &last)));
    if (!inside || (!empty && last >= elements))
      fail("a tensor of size " + c10::str(c10::IntArrayRef(size)) + ", stride " + c10::str(c10::IntArrayRef(stride)) + " and offset " +
           std::to_string(offset) + " does not lie inside its storage of " + std::to_string(elements) + " elements");
    auto v = make(kind::tensor);
    v.tensor_ = storage.as_strided(size, stride, offset);
    return v;
  }

  // BINPERSID ('storage', type, key, location, numel): record data/<key> as a flat CPU tensor
  // (whatever the location, as map_location='cpu'), read once per key so that views share it.
  py_value persistent(const py_value& id) {
    const auto is_storage = [](const py_value& v) { return v.kind_ == kind::string && v.text_ == "storage"; };
    if (id.kind_ != kind::tuple || id.items_->size() < 5 || !is_storage((*id.items_)[0]))
      fail("a persistent id is not a torch storage's");
    static const std::unordered_map<std::string_view, c10::ScalarType> dtypes = {
        {"torch.FloatStorage", c10::kFloat}, {"torch.DoubleStorage", c10::kDouble}, {"torch.HalfStorage", c10::kHalf},
        {"torch.BFloat16Storage", c10::kBFloat16}, {"torch.LongStorage", c10::kLong}, {"torch.IntStorage", c10::kInt},
        {"torch.ShortStorage", c10::kShort}, {"torch.CharStorage", c10::kChar}, {"torch.ByteStorage", c10::kByte},
        {"torch.BoolStorage", c10::kBool}, {"torch.ComplexFloatStorage", c10::kComplexFloat},
        {"torch.ComplexDoubleStorage", c10::kComplexDouble}, {"torch.UntypedStorage", c10::kByte},
        {"torch.storage.UntypedStorage", c10::kByte}, {"torch.storage._UntypedStorage", c10::kByte}};
    const auto& a = *id.items_;
    auto type = arg(a, 1, kind::object, "a storage's type").text_;
    if (type.starts_with("torch.cuda.")) type.erase(6, 5);  // torch.cuda.FloatStorage: a CPU tensor all the same
    const auto& key = arg(a, 2, kind::string, "a storage's key").text_;
    const auto numel = arg(a, 4, kind::integer, "a storage's size").int_;
    const auto dtype = dtypes.find(type);
    if (dtype == dtypes.end()) fail("a storage is a " + type + ", which this reader does not support");
    auto found = storages_.find(key);
    if (found == storages_.end()) {
      const auto record = zip_.find("data/" + key);
      if (!record) fail("its storage data/" + key + " is missing from the zip");
      auto data = c10::GetCPUAllocator()->allocate(record->size());
      if (!record->empty()) std::memcpy(data.get(), record->data(), record->size());
      found = storages_.emplace(key, c10::Storage(c10::Storage::use_byte_size_t(), record->size(), std::move(data), nullptr, false)).first;
    }
    const auto& storage = found->second;
    const auto item = c10::elementSize(dtype->second);
    if (numel < 0 || storage.nbytes() % item != 0 || storage.nbytes() / item != static_cast<std::uint64_t>(numel))
      fail("its storage data/" + key + " holds " + std::to_string(storage.nbytes()) + " bytes, not " + std::to_string(numel) +
           " elements of " + std::to_string(item) + " bytes");
    const auto* bytes = static_cast<const unsigned char*>(storage.data());
    if (dtype->second == c10::kBool && std::any_of(bytes, bytes + storage.nbytes(), [](unsigned char b) { return b > 1; }))
      fail("its bool storage data/" + key + " holds bytes other than 0 and 1");  // which would be undefined bools
    auto v = make(kind::tensor);
    v.tensor_ = at::empty({0}, at::dtype(dtype->second)).set_(storage, 0, {numel}, {1});
    return v;
  }

  // Python's garbage collector, in short, so that a damaged file's cycles cannot leak: a
  // container the result holds inside itself holds None there instead (torch.save never writes
  // one), and containers outside the result are emptied. (A depth-first walk with a path, not
  // recursion.)
  void collect(py_value* result) {
    std::unordered_map<const void*, bool> done;  // false while on the path
    std::vector<std::pair<py_value*, std::size_t>> path;  // a container, its next child
    auto enter = [&](py_value& v) {
      if (!v.items_ && !v.entries_) return;
      const auto [it, fresh] = done.emplace(v.id(), false);
      if (!fresh && !it->second) v = py_value();  // back to a container on the path: a cycle
      if (!fresh) return;
      if (v.items_ && v.entries_) done.emplace(v.entries_.get(), true);  // an object's second container
      path.emplace_back(&v, 0);
    };
    if (result) enter(*result);
    while (!path.empty()) {
      auto [v, i] = path.back();
      ++path.back().second;
      const std::size_t n = v->items_ ? v->items_->size() : 0, m = v->entries_ ? v->entries_->size() : 0;
      if (i < n) enter((*v->items_)[i]);
      else if (i < n + 2 * m) enter((i - n) % 2 ? (*v->entries_)[(i - n) / 2].second : (*v->entries_)[(i - n) / 2].first);
      else done[v->id()] = true, path.pop_back();
    }
    for (auto& v : made_) {
      if (done.contains(v.id())) continue;
      if (v.items_) v.items_->clear();
      if (v.entries_) v.entries_->clear();
    }
    made_.clear();
  }

  std::string_view in_;
  std::size_t pos_ = 0, at_ = 0;  // where the next opcode is, where this one began
  const std::string& name_;
  const zip_records& zip_;
  list_type stack_, made_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, py_value> memo_;
  std::unordered_map<std::string, c10::Storage> storages_;
};

TP_DECL py_value read_torch_save(const std::string& bytes, const std::string& name) {
  if (!bytes.starts_with(std::string_view("PK\3\4", 4))) {
    if (bytes.starts_with("TPCKPT"))
      throw checkpoint_error(name + ": is a checkpoint of an older tp (its own format " +
                             (bytes.size() >= 8 ? std::to_string(static_cast<unsigned char>(bytes[7])) : std::string("?")) +
                             "), which this reader does not open; load it with tp::load_checkpoint or tp::load_model");
    throw checkpoint_error(name + ": is not a torch.save file in the zip format (it is in PyTorch's legacy format, or not " +
                           "PyTorch's at all); save it again with torch.save(obj, path) from PyTorch 1.6 or later");
  }
  const auto damaged = [&](const std::string& what) {
    return checkpoint_error(name + ": is not a readable torch.save zip (" + what + "); it is truncated or damaged: save or copy it " +
                            "again");
  };
  std::optional<zip_records> zip;
  try {
    zip.emplace(bytes);
  } catch (const std::invalid_argument& e) {
    throw damaged(e.what());
  } catch (const std::runtime_error& e) {
    throw checkpoint_error(name + ": is corrupt: " + e.what() + "; use an older copy or checkpoint");
  }
  try {
    if (const auto order = zip->find("byteorder"); order && *order != "little")
      throw checkpoint_error(name + ": was saved on a big-endian machine, which this reader does not support; save it again on a " +
                             "little-endian one");
    const auto pickle = zip->find("data.pkl");
    if (!pickle) throw damaged("it has no data.pkl");
    return python_unpickler(*pickle, name, *zip).read();
  } catch (const checkpoint_error&) {
    throw;
  } catch (const c10::Error& e) {
    throw damaged(e.what_without_backtrace());
  } catch (const std::logic_error& e) {  // std::out_of_range and the like, from what the file holds
    throw damaged(e.what());
  }
}

TP_DECL py_value read_torch_save(const std::filesystem::path& path) {
  return read_torch_save(read_whole_file<checkpoint_error>(path, path.string(), "a torch.save file"), path.string());
}

TP_DECL c10::IValue to_ivalue(const py_value& value, const std::string& path) {
  // Recursive, with a bound: a file may nest values a million deep.
  const auto convert = [](const auto& self, const py_value& v, const std::string& where, int depth) -> c10::IValue {
    if (depth > 64) throw checkpoint_error(where + " nests values more than 64 deep; a checkpoint's state never does");
    using k = py_value::kind;
    switch (v.type()) {
      case k::none: return {};
      case k::boolean: return v.as_bool();
      case k::integer: return v.as_int();
      case k::real: return v.as_double();
      case k::string: return v.as_string();
      case k::tensor: return v.tensor();
      case k::list: {
        c10::impl::GenericList out(c10::AnyType::get());
        for (std::size_t i = 0; i < v.items().size(); ++i) out.push_back(self(self, v.items()[i], where + "/" + std::to_string(i), depth + 1));
        return out;
      }
      case k::tuple: {
        std::vector<c10::IValue> out;
        for (std::size_t i = 0; i < v.items().size(); ++i) out.push_back(self(self, v.items()[i], where + "/" + std::to_string(i), depth + 1));
        return c10::ivalue::Tuple::create(std::move(out));
      }
      case k::dict: {
        bool by_int = !v.entries().empty();
        for (const auto& [key, item] : v.entries()) {
          if (key.type() != k::string && key.type() != k::integer)
            throw checkpoint_error(where + " has a key that is " + key.describe() + ", where a checkpoint's keys are str or int");
          by_int = by_int && key.type() == k::integer;
        }
        c10::impl::GenericDict out(by_int ? c10::TypePtr(c10::IntType::get()) : c10::TypePtr(c10::StringType::get()), c10::AnyType::get());
        for (const auto& [key, item] : v.entries()) {
          if ((key.type() == k::integer) != by_int) throw checkpoint_error(where + " mixes str and int keys");
          const auto name = by_int ? std::to_string(key.as_int()) : key.as_string();
          auto converted = self(self, item, where + "/" + name, depth + 1);
          if (by_int) out.insert_or_assign(key.as_int(), std::move(converted));
          else out.insert_or_assign(key.as_string(), std::move(converted));
        }
        return out;
      }
      default: throw checkpoint_error(where + " is " + v.describe() + ", which a checkpoint's state never holds");
    }
  };
  return convert(convert, value, path, 0);
}

TP_DECL std::vector<char> torch_save_bytes(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* data, std::size_t n) { pickle.insert(pickle.end(), data, data + n); }, nullptr, nullptr,
                              nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> bytes;
  {
    caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, std::size_t n) -> std::size_t {
      bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
      return n;
    });
    // The storages under the keys the pickle names them by (their order), then the pickle.
    const auto& tensors = pickler.tensorData();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto storage = torch::jit::getWriteableTensorData(tensors[i]);
      zip.writeRecord("data/" + std::to_string(i), storage.data(), storage.sizeInBytes());
    }
    zip.writeRecord("data.pkl", pickle.data(), pickle.size());
    zip.writeEndOfFile();
  }
  return bytes;
}

}  // namespace tp::detail
#endif
