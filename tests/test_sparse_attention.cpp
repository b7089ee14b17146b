// Sparse attention (core/attention_math.h, core/attention_blocks.h): the
// patterns against the definition written out again here, the tile
// classification and the block map against brute force, the random draws, and
// every implementation against attention with the explicit mask M, in float64,
// float32 (flash's error budget) and gradcheck, every implementation
// (EnumNames<AttentionImpl>) on every device (TEST_CASE_EVERY_DEVICE): a
// device's results are compared with the CPU's.
#include <set>
#include <tuple>

#include "core/attention_blocks.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace sparse_attention_test {

using namespace ag;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;


using ag::test::sparse_patterns;

std::string describe(const SparsePattern& p) {
  return "window " + std::to_string(p.window) + " dilation " + std::to_string(p.dilation) + " global " +
         std::to_string(p.global) + " random " + std::to_string(p.random_blocks) + " seed " + std::to_string(p.seed) +
         " layer " + std::to_string(p.layer);
}

using ag::test::defined_visible;

// M [Hq, Tq, Tk] from defined_visible: 0 where visible, −∞ elsewhere.
Tensor defined_mask(const SparsePattern& pattern, int64_t Hq, int64_t Tq, int64_t Tk, int64_t q_offset) {
  std::vector<double> m(Hq * Tq * Tk);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j)
        m[(h * Tq + i) * Tk + j] =
            defined_visible(pattern, h, i + q_offset, j) ? 0.0 : -std::numeric_limits<double>::infinity();
  return Tensor::from_vector(m, {Hq, Tq, Tk}, DType::Float64);
}

struct SparseProblem {
  int64_t B, Hq, Hkv, Tq, Tk, d;
  SparsePattern pattern;
  AttentionSpec spec(AttentionImpl impl) const { return {.function = SoftmaxAttention{.impl = impl, .pattern = pattern}, .causal = true}; }
  Inputs inputs(uint64_t seed) const {
    return {random({B, Hq, Tq, d}, seed), random({B, Hkv, Tk, d}, seed + 1), random({B, Hkv, Tk, d}, seed + 2)};
  }
};

using Result = ag::test::AttentionRun;
using ag::test::max_abs_error;
using ag::test::run_attention;

// softmax(scale·QKᵀ + M) V with the test's own M, K and V repeated over each group, by ops.
Result explicit_mask_reference(const SparseProblem& p, const Inputs& in, const Tensor& upstream) {
  Inputs x;
  for (const Tensor& t : in) x.push_back(t.detach().clone().requires_grad_());
  const int64_t group = p.Hq / p.Hkv;
  const auto repeat = [&](const Tensor& t) {
    return expand(t.reshape({p.B, p.Hkv, 1, p.Tk, p.d}), {p.B, p.Hkv, group, p.Tk, p.d}).reshape({p.B, p.Hq, p.Tk, p.d});
  };
  const Tensor S = matmul(x[0], transpose(repeat(x[1]), 2, 3)) * (1.0 / std::sqrt(static_cast<double>(p.d)));
  const Tensor Z = matmul(softmax(S + defined_mask(p.pattern, p.Hq, p.Tq, p.Tk, p.Tk - p.Tq)), repeat(x[2]));
  Z.backward(upstream);
  return {.Z = Z.detach(), .dQ = x[0].grad(), .dK = x[1].grad(), .dV = x[2].grad()};
}

std::vector<SparseProblem> sparse_problems() {
  std::vector<SparseProblem> all;
  for (const SparsePattern& pattern : sparse_patterns()) {
    all.push_back({2, 4, 2, 100, 100, 8, pattern});
    all.push_back({1, 2, 1, 37, 150, 4, pattern});  // fewer queries than keys: q_offset = Tk − Tq
    all.push_back({1, 2, 2, 200, 200, 16, pattern});
  }
  return all;
}

// Every implementation equals attention with the explicit mask, Z and every gradient ≤ 1e-12.
void check_patterns_equal_explicit_mask(Device device) {
  for (const SparseProblem& p : sparse_problems()) {
    CAPTURE(describe(p.pattern));
    CAPTURE(p.Tq);
    CAPTURE(p.Tk);
    const Inputs in = p.inputs(500);
    const Tensor upstream = random({p.B, p.Hq, p.Tq, p.d}, 503, DType::Float64, false);
    const Result reference = explicit_mask_reference(p, in, upstream);
    for (AttentionImpl impl : ag::test::attention_impls()) {
      CAPTURE(name_of(impl));
      const Result r = run_attention(in, p.spec(impl), device, DType::Float64, upstream);
      CHECK_CLOSE(r.Z, reference.Z, 1e-12);
      CHECK_CLOSE(r.dQ, reference.dQ, 1e-12);
      CHECK_CLOSE(r.dK, reference.dK, 1e-12);
      CHECK_CLOSE(r.dV, reference.dV, 1e-12);
    }
  }
}


// FlashAttention's recipe with a pattern: flash in float32 within twice dense float32's error against float64.
void check_flash_error_budget(Device device) {
  for (const SparsePattern& pattern : sparse_patterns())
    for (int64_t T : {63, 65, 300}) {
      const SparseProblem p{2, 8, 4, T, T, 32, pattern};
      CAPTURE(describe(pattern));
      CAPTURE(T);
      const Inputs in = p.inputs(600 + T);
      const Tensor upstream = random({p.B, p.Hq, T, p.d}, 601, DType::Float64, false);
      const Result exact = run_attention(in, p.spec(AttentionImpl::Dense), Device::CPU, DType::Float64, upstream);
      const Result dense = run_attention(in, p.spec(AttentionImpl::Dense), device, DType::Float32, upstream);
      const Result flash = run_attention(in, p.spec(AttentionImpl::Flash), device, DType::Float32, upstream);
      CHECK(max_abs_error(flash.Z, exact.Z) <= 2 * max_abs_error(dense.Z, exact.Z));
      CHECK(max_abs_error(flash.dQ, exact.dQ) <= 2 * max_abs_error(dense.dQ, exact.dQ));
      CHECK(max_abs_error(flash.dK, exact.dK) <= 2 * max_abs_error(dense.dK, exact.dK));
      CHECK(max_abs_error(flash.dV, exact.dV) <= 2 * max_abs_error(dense.dV, exact.dV));
    }
}

}  // namespace

TEST_CASE("sparse attention: AttentionMask::visible is the issue's definition") {
  for (const SparsePattern& pattern : sparse_patterns())
    for (int64_t q_offset : {0, 5, -3}) {
      const AttentionMask mask{.causal = true, .q_offset = q_offset, .pattern = pattern};
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t i = 0; i < 90; ++i)
          for (int64_t j = 0; j < 100; ++j) {
            const bool expected = i + q_offset >= 0 && defined_visible(pattern, h, i + q_offset, j);
            if (mask.visible(h, i, j) != expected) FAIL_CHECK(describe(pattern) << " h " << h << " i " << i << " j " << j);
          }
    }
}

TEST_CASE("sparse attention: each query sees itself, and the window W·δ back") {
  const AttentionMask mask{.causal = true, .q_offset = 0, .pattern = {.window = 4, .dilation = 3}};
  for (int64_t i = 0; i < 50; ++i) {
    std::vector<int64_t> seen;
    for (int64_t j = 0; j < 50; ++j)
      if (mask.visible(0, i, j)) seen.push_back(j);
    std::vector<int64_t> expected;
    for (int64_t k = 3; k >= 0; --k)
      if (i - 3 * k >= 0) expected.push_back(i - 3 * k);
    CHECK(seen == expected);
  }
}

TEST_CASE("sparse attention: random blocks are R distinct earlier blocks, fixed by (seed, layer, head)") {
  const SparsePattern pattern{.window = 4, .random_blocks = 3, .seed = 42, .layer = 1};
  std::set<int64_t> drawn_anywhere;
  for (int64_t query_block = 0; query_block < 40; ++query_block) {
    const RandomBlocks a(pattern, 2, query_block), b(pattern, 2, query_block);
    CHECK(a.count == std::min<int64_t>(query_block, 3));
    const std::set<int64_t> distinct(a.block, a.block + a.count);
    CHECK(static_cast<int64_t>(distinct.size()) == a.count);
    for (int64_t k = 0; k < a.count; ++k) {
      CHECK(a.block[k] >= 0);
      CHECK(a.block[k] < query_block);
      CHECK(a.block[k] == b.block[k]);  // the same draw every time it is made
      if (query_block == 39) drawn_anywhere.insert(a.block[k]);
    }
  }
  // Another head, layer or seed draws other blocks (for block 39, out of C(39, 3) = 9139 subsets).
  const auto blocks_of = [](const SparsePattern& p, int64_t h) {
    const RandomBlocks r(p, h, 39);
    return std::set<int64_t>(r.block, r.block + r.count);
  };
  SparsePattern other_layer = pattern, other_seed = pattern;
  other_layer.layer = 2;
  other_seed.seed = 43;
  CHECK(blocks_of(pattern, 2) == drawn_anywhere);
  CHECK(blocks_of(pattern, 3) != drawn_anywhere);
  CHECK(blocks_of(other_layer, 2) != drawn_anywhere);
  CHECK(blocks_of(other_seed, 2) != drawn_anywhere);
}

TEST_CASE("sparse attention: tile classification and the block map match brute force") {
  for (const SparsePattern& pattern : sparse_patterns())
    for (const auto& [Tq, Tk] : {std::pair<int64_t, int64_t>{100, 100}, {37, 150}, {130, 64}})
      for (const auto& [query_tile, key_tile] : {std::pair<int64_t, int64_t>{64, 128}, {16, 16}, {7, 5}, {32, 32}}) {
        CAPTURE(describe(pattern));
        const int64_t Hq = 3;
        const AttentionShape shape{.B = 1, .Hq = Hq, .Hkv = 1, .Tq = Tq, .Tk = Tk, .d = 4, .scale = 1.0,
                                   .mask = {.causal = true, .q_offset = Tk - Tq, .pattern = pattern},
                                   .q = {}, .kv = {}};
        const AttentionBlockMap map(shape, query_tile, key_tile);
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i0 = 0; i0 < Tq; i0 += query_tile) {
            const int64_t i1 = std::min(i0 + query_tile, Tq);
            std::vector<std::tuple<int64_t, int64_t, TileVisibility>> expected;  // j0, cols, visibility
            const auto brute_force = [&](int64_t j0, int64_t j1) {
              int64_t shown = 0;
              for (int64_t i = i0; i < i1; ++i)
                for (int64_t j = j0; j < j1; ++j) shown += shape.mask.visible(h, i, j);
              return shown == 0 ? TileVisibility::None
                                : shown == (i1 - i0) * (j1 - j0) ? TileVisibility::All : TileVisibility::Partial;
            };
            for (int64_t j0 = 0; j0 < Tk; j0 += key_tile) {
              const int64_t j1 = std::min(j0 + key_tile, Tk);
              const TileVisibility brute = brute_force(j0, j1);
              if (shape.mask.tile(h, i0, i1, j0, j1) != brute)
                FAIL_CHECK("tile h " << h << " queries " << i0 << ".." << i1 << " keys " << j0 << ".." << j1);
              if (brute == TileVisibility::All) expected.emplace_back(j0, j1 - j0, brute);
              if (brute != TileVisibility::Partial) continue;
              // listed from its first to its last visible key, classified again
              int64_t first = j1, last = j0;
              for (int64_t i = i0; i < i1; ++i)
                for (int64_t j = j0; j < j1; ++j)
                  if (shape.mask.visible(h, i, j)) {
                    first = std::min(first, j);
                    last = std::max(last, j);
                  }
              expected.emplace_back(first, last + 1 - first, brute_force(first, last + 1));
            }
            std::vector<std::tuple<int64_t, int64_t, TileVisibility>> listed;
            for (const KeyTile& key : map.key_tiles(h, i0)) listed.emplace_back(key.j0, key.cols, key.visibility);
            CHECK(listed == expected);
          }
      }
}

TEST_CASE("sparse attention: the block map is cached, and built per head only with random blocks") {
  const auto shape_with = [](const SparsePattern& pattern) {
    return AttentionShape{.B = 1, .Hq = 4, .Hkv = 4, .Tq = 256, .Tk = 256, .d = 4, .scale = 1.0,
                          .mask = {.causal = true, .q_offset = 0, .pattern = pattern}, .q = {}, .kv = {}};
  };
  const AttentionShape window = shape_with({.window = 32}), random_blocks = shape_with({.window = 32, .random_blocks = 2});
  CHECK(attention_block_map(window, 64, 128) == attention_block_map(window, 64, 128));
  CHECK(attention_block_map(window, 64, 128) != attention_block_map(random_blocks, 64, 128));
  // Window 32 over 64 × 128 tiles: query tile 0 sees key tile 0; tile 1 (queries 64..127) too; tile 2 sees 0 and 1.
  const auto map = attention_block_map(window, 64, 128);
  CHECK(map->key_tiles(3, 0).size() == 1);
  CHECK(map->key_tiles(0, 128).size() == 2);
  CHECK(map->visible_tiles() == 1 + 1 + 2 + 1);  // one head stored: the window does not depend on it
  CHECK(attention_block_map(random_blocks, 64, 128)->visible_tiles() >= 4 * 5);
}

TEST_CASE_EVERY_DEVICE("sparse attention: every implementation equals attention with the explicit mask, float64") {
  check_patterns_equal_explicit_mask(device);
}

TEST_CASE_EVERY_DEVICE("sparse attention: flash's float32 error is within twice dense's with each pattern") {
  check_flash_error_budget(device);
}

// On a device: Z and the gradients in float64 within 1e-12 of the CPU's (as of the explicit mask).
TEST_CASE_EVERY_DEVICE("sparse attention: gradcheck of dense and flash with each pattern at tiny sizes") {
  for (const SparsePattern& pattern : sparse_patterns())
    for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
      CAPTURE(describe(pattern));
      CAPTURE(name_of(impl));
      const SparseProblem p{1, 2, 1, 40, 40, 3, pattern};  // 40 > two random blocks of 16
      const AttentionSpec spec = p.spec(impl);
      const GradcheckFn f = [spec](const Inputs& x) { return attention(x[0], x[1], x[2], spec); };
      if (device == Device::CPU) CHECK_GRADCHECK(f, p.inputs(700));
      else ag::test::check_device_matches_cpu(device, f, p.inputs(700), 1e-12, DType::Float64);
    }
}

TEST_CASE("sparse attention: patterns need causal attention and a window") {
  const Tensor x = Tensor::zeros({1, 1, 4, 2});
  CHECK_THROWS_WITH_AS(attention(x, x, x, {.function = SoftmaxAttention{.pattern = {.window = 2}}}),
                       doctest::Contains("a sparse pattern needs causal attention"), Error);
  CHECK_THROWS_WITH_AS(attention(x, x, x, {.function = SoftmaxAttention{.pattern = {.global = 2}}, .causal = true}),
                       doctest::Contains("without one (window 0) every earlier key is visible already"), Error);
  CHECK_THROWS_WITH_AS(attention(x, x, x, {.function = SoftmaxAttention{.pattern = {.window = 2, .random_blocks = 17}}, .causal = true}),
                       doctest::Contains("random <= 16"), Error);
}

}  // namespace sparse_attention_test
