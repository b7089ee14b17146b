// The names of an enum's values, written once beside the enum and used for
// every conversion: command-line options, checkpoint metadata, messages.
//
//   template <> struct EnumNames<GeluApprox> {
//     static constexpr std::pair<GeluApprox, const char*> values[] = {{GeluApprox::Erf, "erf"}, ...};
//   };
#pragma once
#include <string>
#include <utility>

#include "core/error.h"

namespace ag {

template <class E> struct EnumNames;  // specialised next to each enum that has names

template <class E> const char* name_of(E value) {
  for (const auto& [v, name] : EnumNames<E>::values)
    if (v == value) return name;
  return "?";
}

// "erf|tanh"
template <class E> std::string enum_choices() {
  std::string out;
  for (const auto& [v, name] : EnumNames<E>::values) {
    if (!out.empty()) out += '|';
    out += name;
  }
  return out;
}

// The value called `name`; `what` names where it came from in the error ("--gelu").
template <class E> E enum_from_name(const std::string& name, const std::string& what) {
  for (const auto& [v, n] : EnumNames<E>::values)
    if (name == n) return v;
  throw Error(what + ": '" + name + "' is not one of " + enum_choices<E>());
}

}  // namespace ag
