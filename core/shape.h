// Shapes, numpy-style broadcasting, and the strides of a row-major layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ag {

using Shape = std::vector<int64_t>;

// The number of elements, and of bytes for elements of `element_size` bytes.
// attograd counts elements and bytes in int64, so a shape whose size overflows
// it (or with a negative dim) is an ag::Error here, not a wrapped-around
// allocation later. Every tensor's shape passed byte_size when it was created.
int64_t numel(const Shape& shape);
int64_t byte_size(const Shape& shape, size_t element_size);
std::string to_string(const Shape& shape);  // "[3,4]"

// Row-major strides, in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);

// Numpy broadcasting: align trailing dims; each pair must be equal or contain a 1.
// Throws ag::Error naming `op` and both shapes when they are incompatible.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// Strides that read a tensor of shape `shape` as if it had shape `target`
// (which it broadcasts to): stride 0 on the dims it is broadcast along.
std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target);

// Wraps a possibly negative dim into [0, rank); throws naming `op` if out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t rank);

}  // namespace ag
