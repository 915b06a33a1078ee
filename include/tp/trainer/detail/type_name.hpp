#pragma once
// Type names for people (phase markers, callback timings) and for checkpoint keys.
#include <string>
#include <string_view>
#include <typeinfo>

#include <c10/util/Type.h>

namespace tp::detail {

// A type's name for people: demangled, without tp:: and anonymous-namespace qualifiers, and
// with template arguments nested in template arguments shown as <...> (all of them, if the
// name is still long): InferenceRunner<...>, Trigger<ModelSaver, schedule::every_n_epochs>.
inline std::string collapse_template_arguments(const std::string& name, int keep_depth) {
  std::string out;
  int depth = 0;
  for (const char c : name) {
    if (c == '<' && depth++ == keep_depth) out += "<...";
    if (c == '>' && --depth == keep_depth) {
      out += '>';
      continue;
    }
    if (depth <= keep_depth) out += c;
  }
  return out;
}
inline std::string demangled_without_qualifiers(const std::type_info& type) {
  std::string name = c10::demangle(type.name());
  for (const std::string_view noise : {"(anonymous namespace)::", "tp::"})
    for (auto at = name.find(noise); at != std::string::npos; at = name.find(noise)) name.erase(at, noise.size());
  return name;
}
inline std::string readable_type_name(const std::type_info& type) {
  const std::string name = collapse_template_arguments(demangled_without_qualifiers(type), 1);
  return name.size() <= 60 ? name : collapse_template_arguments(name, 0);
}

// A callback's key in a checkpoint, before its occurrence number: its type's name with every
// template argument folded (EarlyStopping<...>), so that the key does not change with a
// callback's template arguments; '.' is not allowed in an archive's keys and becomes '_'.
inline std::string state_key_of_type(const std::type_info& type) {
  std::string name = collapse_template_arguments(demangled_without_qualifiers(type), 0);
  for (char& c : name)
    if (c == '.') c = '_';
  return name;
}

}  // namespace tp::detail
