// Element types and devices. Float32 is for training, Float64 exists so that
// gradients can be checked tightly; Int64 holds indices (token ids, targets).
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "core/enum_names.h"
#include "core/error.h"

namespace ag {

enum class DType { Float32, Float64, Int64 };
enum class Device { CPU, CUDA };

// What attograd knows about each dtype, one row each; dtype_size, dtype_name
// and is_floating read it (the C++ type of each is dtype_of and visit_dtype below).
struct DTypeInfo {
  DType dtype;
  const char* name;  // in messages and describe()
  size_t size;       // bytes per element
  bool floating;     // can require grad; int64 only holds indices
};
inline constexpr DTypeInfo kDTypes[] = {
    {DType::Float32, "float32", 4, true},
    {DType::Float64, "float64", 8, true},
    {DType::Int64, "int64", 8, false},
};
constexpr const DTypeInfo& dtype_info(DType t) {
  for (const DTypeInfo& row : kDTypes)
    if (row.dtype == t) return row;
  throw Error("dtype_info: a DType without a row in kDTypes");
}

constexpr size_t dtype_size(DType t) { return dtype_info(t).size; }
constexpr bool is_floating(DType t) { return dtype_info(t).floating; }
constexpr const char* dtype_name(DType t) { return dtype_info(t).name; }
template <> struct EnumNames<Device> {
  static constexpr std::pair<Device, const char*> values[] = {{Device::CPU, "cpu"}, {Device::CUDA, "cuda"}};
};
inline const char* device_name(Device d) { return name_of(d); }
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
inline std::ostream& operator<<(std::ostream& os, Device d) { return os << device_name(d); }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }

// Calls body(T{}) with T the C++ type of a floating dtype; kernels use it to
// write one templated loop for float and double.
template <class Body>
decltype(auto) visit_floating(DType t, const char* op, Body&& body) {
  switch (t) {
    case DType::Float32: return body(float{});
    case DType::Float64: return body(double{});
    default: break;
  }
  throw Error(std::string(op) + ": expected a floating dtype, got " + dtype_name(t));
}

// Calls body(T{}) with T the C++ type of any dtype: for kernels that only move
// elements (copies, fills, casts) and so serve indices too.
template <class Body>
decltype(auto) visit_dtype(DType t, Body&& body) {
  switch (t) {
    case DType::Float32: return body(float{});
    case DType::Float64: return body(double{});
    case DType::Int64: return body(int64_t{});
  }
  throw Error("visit_dtype: unknown dtype");
}

}  // namespace ag
