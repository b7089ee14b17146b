#include "core/dispatch.h"
#include "core/threads.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace tensor_test {

using namespace ag;

TEST_CASE("tensor: creation, shapes and dtypes") {
  const Tensor z = Tensor::zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.numel() == 6);
  CHECK(z.dtype() == DType::Float32);
  CHECK(z.device() == Device::CPU);
  CHECK(Tensor::full({2}, 1.5, DType::Float64).to_vector() == std::vector<double>{1.5, 1.5});
  CHECK(Tensor::arange(4).to_vector() == std::vector<double>{0, 1, 2, 3});
  CHECK(Tensor::scalar(3.0).item() == 3.0);
  CHECK(Tensor::from_vector({1, 2, 3, 4}, {2, 2}).to(DType::Float64).to_vector() == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("tensor: the generator gives the same numbers on every machine") {
  // Pinned values: random_bits is integer arithmetic, so these never change.
  CHECK(random_bits(0, 0) == 0xE220A8397B1DCDAFull);
  CHECK(random_bits(1337, 5) == random_bits(1337, 5));
  Generator a(42), b(42);
  const Tensor x = Tensor::randn({1000}, DType::Float64, &a);
  const Tensor y = Tensor::randn({1000}, DType::Float64, &b);
  CHECK(x.to_vector() == y.to_vector());
  double mean = 0, var = 0;
  for (double v : x.to_vector()) mean += v / 1000;
  for (double v : x.to_vector()) var += (v - mean) * (v - mean) / 1000;
  CHECK(std::abs(mean) < 0.1);
  CHECK(std::abs(var - 1) < 0.1);
  const std::vector<double> u = Tensor::uniform({1000}, 2, 3, DType::Float64, &a).to_vector();
  CHECK(*std::min_element(u.begin(), u.end()) >= 2.0);
  CHECK(*std::max_element(u.begin(), u.end()) < 3.0);
}

TEST_CASE("tensor: reshape is a view, clone and detach behave") {
  const Tensor x = Tensor::arange(6, DType::Float64);
  const Tensor r = x.reshape({2, -1});
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.raw_data() == x.raw_data());
  CHECK(x.clone().raw_data() != x.raw_data());
  CHECK(x.detach().raw_data() == x.raw_data());
  CHECK_THROWS_WITH_AS(x.reshape({4, 2}), doctest::Contains("reshape: [6] to [4,2]"), Error);
}

TEST_CASE("tensor: transpose and slice copy the right elements") {
  const Tensor x = Tensor::arange(6, DType::Float64).reshape({2, 3});
  CHECK(transpose(x, 0, 1).to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(slice(x, 1, 1, 3).to_vector() == std::vector<double>{1, 2, 4, 5});
  CHECK(concat({x, x}, 0).shape() == Shape{4, 3});
  CHECK(split(x, {1, 2}, 1)[1].to_vector() == std::vector<double>{1, 2, 4, 5});
}

TEST_CASE("cuda: a tensor can move to the device and back") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor x = Tensor::arange(5, DType::Float64);
  const Tensor d = x.to(Device::CUDA);
  CHECK(d.device() == Device::CUDA);
  CHECK(d.to(Device::CPU).to_vector() == x.to_vector());
}

TEST_CASE("tensor: a normal draw takes one counter, so later draws never reuse its bits") {
  Generator a(5), b(5);
  Tensor::randn({4}, DType::Float64, &a);
  CHECK(a.offset() == 4);
  const std::vector<double> after = Tensor::uniform({2}, 0, 1, DType::Float64, &a).to_vector();
  b.advance(4);
  CHECK(after[0] == random_uniform(5, 4));
  // The uniforms behind normal i are (seed, i) and (seed ^ key, i): none is uniform 4 or 5.
  for (uint64_t i = 0; i < 4; ++i) CHECK(random_uniform(5, i) != after[0]);
}

TEST_CASE("tensor: reshape rejects negative dims and an ambiguous -1") {
  const Tensor x = Tensor::arange(6);
  CHECK_THROWS_WITH_AS(x.reshape({-2, -3}), doctest::Contains("negative dim -2"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({0}).reshape({0, -1}), doctest::Contains("ambiguous"), Error);
}

TEST_CASE("tensor: matmul with an empty inner dim gives zeros") {
  const Tensor c = matmul(Tensor::zeros({5, 0}), Tensor::zeros({0, 3}));
  CHECK(c.shape() == Shape{5, 3});
  for (double v : c.to_vector()) CHECK(v == 0.0);
}

TEST_CASE("test helpers: a NaN never compares close") {
  const Tensor a = Tensor::from_vector({NAN, 1, 2}, {3}, DType::Float64);
  const Tensor b = Tensor::from_vector({5, 1, 2}, {3}, DType::Float64);
  CHECK(ag::test::relative_error(a, b) == INFINITY);
  CHECK(ag::test::relative_error(b, a) == INFINITY);
  CHECK(ag::test::relative_error(a, a) == 0.0);  // NaN in both places is the same answer
}

TEST_CASE("tensor: view reads a contiguous range of the storage at an offset") {
  const Tensor x = Tensor::arange(10, DType::Float64);
  const Tensor v = x.view(4, {2, 3});
  CHECK(v.to_vector() == std::vector<double>{4, 5, 6, 7, 8, 9});
  CHECK(v.view(3, {2}).to_vector() == std::vector<double>{7, 8});  // offsets compose
  CHECK(v.detach().raw_data() == v.raw_data());
  Tensor writable = v;
  kernel::fill(writable, -1.0);  // writes land in x's storage
  CHECK(x.to_vector() == std::vector<double>{0, 1, 2, 3, -1, -1, -1, -1, -1, -1});
  CHECK_THROWS_WITH_AS(x.view(8, {3}), doctest::Contains("does not fit"), Error);
}

namespace {
// Per head h of X [T, H·d] (one batch entry): C_h = X_h X_hᵀ with X_h the
// columns h·d .. (h+1)·d − 1, read in place through lda = ldb = H·d and written
// to C [H, T, T]; the reference slices each head out first.
void check_gemm_reads_column_blocks(Device device) {
  const int64_t T = 5, H = 3, d = 4;
  const Tensor x = ag::test::random({T, H * d}, 7, DType::Float64, false);
  Tensor c = Tensor::zeros({H, T, T}, DType::Float64, device);
  kernel::GemmShape shape{H, T, T, d};
  shape.trans_b = true;
  shape.a_batch_stride = shape.b_batch_stride = d;
  shape.c_batch_stride = T * T;
  shape.lda = shape.ldb = H * d;
  kernel::gemm(shape, x.to(device), x.to(device), c);
  for (int64_t h = 0; h < H; ++h) {
    const Tensor xh = slice(x, 1, h * d, (h + 1) * d);
    CHECK_CLOSE(slice(c.to(Device::CPU), 0, h, h + 1).reshape({T, T}), matmul(xh, transpose(xh, 0, 1)), 1e-14);
  }
}
}  // namespace

namespace {
// The same per head, for each batch entry of X [B, T, H·d] in one call: a batch
// over the heads, a group per entry (heads d apart, entries T·H·d apart), into C
// [B, H, T, T], on one thread and on two (which share the B·H products out);
// and the same with the levels swapped (a batch over the entries, a group per
// head), as cuBLAS runs it when the entries outnumber the heads.
void check_gemm_groups(Device device) {
  const int64_t B = 3, T = 5, H = 2, d = 4;
  const Tensor x = ag::test::random({B, T, H * d}, 8, DType::Float64, false);
  kernel::GemmShape shape{H, T, T, d};
  shape.trans_b = true;
  shape.a_batch_stride = shape.b_batch_stride = d;
  shape.c_batch_stride = T * T;
  shape.lda = shape.ldb = H * d;
  shape.groups = B;
  shape.a_group_stride = shape.b_group_stride = T * H * d;
  shape.c_group_stride = H * T * T;
  const int before = ag::num_threads();
  const std::pair<int, kernel::GemmShape> runs[] = {{1, shape}, {2, shape}, {1, shape.levels_swapped()}};
  for (const auto& run : runs) {
    const int threads = run.first;  // named, not bound: doctest's CAPTURE is a lambda
    const kernel::GemmShape& levels = run.second;
    CAPTURE(threads);
    CAPTURE(levels.groups);
    ag::set_num_threads(threads);
    Tensor c = Tensor::zeros({B, H, T, T}, DType::Float64, device);
    kernel::gemm(levels, x.to(device), x.to(device), c);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const Tensor xbh = slice(slice(x, 0, b, b + 1).reshape({T, H * d}), 1, h * d, (h + 1) * d);
        CHECK_CLOSE(slice(slice(c.to(Device::CPU), 0, b, b + 1), 1, h, h + 1).reshape({T, T}),
                    matmul(xbh, transpose(xbh, 0, 1)), 1e-14);
      }
  }
  ag::set_num_threads(before);
}
}  // namespace

TEST_CASE_EVERY_DEVICE("kernels: gemm reads column blocks of a wider matrix through its leading dims") {
  check_gemm_reads_column_blocks(device);
}

TEST_CASE_EVERY_DEVICE("kernels: gemm repeats its batch over groups (the heads of each batch entry)") {
  check_gemm_groups(device);
}

}  // namespace tensor_test
