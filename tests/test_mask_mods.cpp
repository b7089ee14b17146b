// Softmax attention's mask functions (MaskMods, core/ops.h): prefix-LM, packed documents,
// a token tree, an arbitrary adjacency and a mask_mod of the user's own. Each equals
// softmax(S + M) with the dense −∞ matrix M written out here from its definition, in
// float64 to 1e-12 for composed, dense and flash, the output and every gradient, across
// flash's tiles; float64 gradcheck through flash; a query left with no key gets zeros and
// no gradient; CPU against CUDA; bad input gets an error naming what is wrong.
#include <string>
#include <vector>

#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace mask_mods_test {

using namespace ag;
using ag::test::attention_impls;
using ag::test::random;
using Inputs = std::vector<Tensor>;

namespace {

constexpr double kMaskHidden = -std::numeric_limits<double>::infinity();

// One case: the mask functions, the problem's geometry, and the visibility it should give,
// written independently of the op (sees(b, h, i, j) with query i at position i + Tk − Tq).
struct MaskCase {
  std::string name = {};
  MaskMods masks = {};
  bool causal = false;
  SparsePattern pattern = {};
  int64_t B = 2, Hq = 2, Hkv = 2, Tq = 150, Tk = 150, d = 8;
  std::function<bool(int64_t b, int64_t h, int64_t p, int64_t j)> sees = {};
};

// Packed documents: boundaries at the given starts (the first at 0).
std::vector<int64_t> packed_ids(int64_t T, const std::vector<int64_t>& starts) {
  std::vector<int64_t> ids(T);
  for (int64_t t = 0, doc = -1; t < T; ++t) {
    for (const int64_t s : starts)
      if (s == t) ++doc;
    ids[t] = doc * 7 + 3;  // any ids: equal within a document
  }
  return ids;
}

// A token tree after a shared prefix: node n's parent a deterministic earlier node (the
// prefix's last position for the first level), some nodes roots of their own.
std::vector<int64_t> tree_parents_of(int64_t T, int64_t prefix) {
  std::vector<int64_t> parents(T);
  for (int64_t n = 0; n < T; ++n) {
    if (n < prefix) parents[n] = n - 1;  // the prefix as a chain (its parents are not read)
    else if (n % 11 == 5) parents[n] = -1;
    else parents[n] = n - 1 - (n * 7) % std::max<int64_t>(1, std::min<int64_t>(n - prefix + 1, 9));
  }
  return parents;
}
bool is_ancestor_or_self(const std::vector<int64_t>& parents, int64_t j, int64_t p) {
  for (int64_t n = p; n >= 0; n = parents[n])
    if (n == j) return true;
  return false;
}

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> all;
  const int64_t T = 150;
  {
    MaskCase c{.name = "prefix-LM 40"};
    c.masks.prefix = 40;
    c.sees = [](int64_t, int64_t, int64_t p, int64_t j) { return j < 40 || j <= p; };
    all.push_back(c);
  }
  {
    const std::vector<int64_t> ids = packed_ids(T, {0, 37, 90, 91, 140});
    MaskCase c{.name = "documents [T]", .causal = true};
    c.masks.documents = Tensor::from_indices(ids, {T});
    c.sees = [ids](int64_t, int64_t, int64_t p, int64_t j) { return j <= p && ids[j] == ids[p]; };
    all.push_back(c);
    MaskCase w{.name = "documents [T] with a window of 20, Tq = 37", .causal = true, .pattern = {.window = 20}, .Tq = 37};
    w.masks.documents = c.masks.documents;
    w.sees = [ids](int64_t, int64_t, int64_t p, int64_t j) { return j <= p && p - j < 20 && ids[j] == ids[p]; };
    all.push_back(w);
  }
  {
    // An id that comes back after another's: not one run per document (held as bytes, not as
    // document starts); a query still sees only its own id's keys.
    std::vector<int64_t> ids = packed_ids(T, {0, 30, 64, 100});
    for (int64_t t = 64; t < 100; ++t) ids[t] = ids[0];
    MaskCase c{.name = "documents [T] whose ids recur", .causal = true};
    c.masks.documents = Tensor::from_indices(ids, {T});
    c.sees = [ids](int64_t, int64_t, int64_t p, int64_t j) { return j <= p && ids[j] == ids[p]; };
    all.push_back(c);
  }
  {
    const std::vector<int64_t> a = packed_ids(T, {0, 70, 130}), b = packed_ids(T, {0, 5, 64, 65, 129});
    std::vector<int64_t> both(a);
    both.insert(both.end(), b.begin(), b.end());
    MaskCase c{.name = "documents [B, T], grouped heads", .Hq = 4};
    c.masks.documents = Tensor::from_indices(both, {2, T});
    c.sees = [both](int64_t batch, int64_t, int64_t p, int64_t j) {
      return j <= p && both[batch * 150 + j] == both[batch * 150 + p];
    };
    all.push_back(c);
  }
  {
    const std::vector<int64_t> parents = tree_parents_of(T, 30);
    MaskCase c{.name = "token tree after a prefix of 30"};
    c.masks.parents = Tensor::from_indices(parents, {T});
    c.masks.tree_prefix = 30;
    c.sees = [parents](int64_t, int64_t, int64_t p, int64_t j) {
      return (j < 30 && j <= p) || is_ancestor_or_self(parents, j, p);
    };
    all.push_back(c);
  }
  {
    const int64_t Tq = 37;  // queries at the last positions 113..149
    std::vector<int64_t> adjacency(Tq * T);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < T; ++j) adjacency[i * T + j] = (i + 113 == j) || (i * 13 + j * 7) % 5 == 0;
    MaskCase c{.name = "adjacency, Tq = 37", .Tq = Tq};
    c.masks.adjacency = Tensor::from_indices(adjacency, {Tq, T});
    c.sees = [adjacency](int64_t, int64_t, int64_t p, int64_t j) { return adjacency[(p - 113) * 150 + j] != 0; };
    all.push_back(c);
  }
  {
    // A graph per batch entry (the lab's graph tasks): entry b's matrix its own, with a self loop.
    std::vector<int64_t> graphs(2 * T * T);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) graphs[(b * T + i) * T + j] = i == j || (i + j * (b + 2)) % 7 == 0;
    MaskCase c{.name = "adjacency [B, Tq, Tk], grouped heads", .Hq = 4};
    c.masks.adjacency = Tensor::from_indices(graphs, {2, T, T});
    c.sees = [graphs](int64_t b, int64_t, int64_t p, int64_t j) { return graphs[(b * 150 + p) * 150 + j] != 0; };
    all.push_back(c);
  }
  {
    const auto f = [](int64_t b, int64_t h, int64_t p, int64_t j) { return p == j || (p - j + 3 * b) % (h + 2) == 0; };
    MaskCase c{.name = "custom mask_mod by batch entry and head, causal", .causal = true};
    c.masks.custom = f;
    c.sees = [f](int64_t b, int64_t h, int64_t p, int64_t j) { return j <= p && f(b, h, p, j); };
    all.push_back(c);
  }
  return all;
}

AttentionSpec mask_spec(const MaskCase& c, AttentionImpl impl) {
  SoftmaxAttention softmax{.impl = impl, .pattern = c.pattern};
  softmax.masks = c.masks;
  return {.function = softmax, .causal = c.causal};
}

// softmax(scale·QKᵀ + M) V with M from c.sees, from ops alone (kv heads repeated by copies).
Tensor masked_reference(const MaskCase& c, const Inputs& x) {
  std::vector<double> m(c.B * c.Hq * c.Tq * c.Tk);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t j = 0; j < c.Tk; ++j)
          m[((b * c.Hq + h) * c.Tq + i) * c.Tk + j] = c.sees(b, h, i + c.Tk - c.Tq, j) ? 0.0 : kMaskHidden;
  const Tensor M = Tensor::from_vector(m, {c.B, c.Hq, c.Tq, c.Tk}, x[0].dtype()).to(x[0].device());
  const auto repeat = [&](const Tensor& t) {
    std::vector<Tensor> heads;
    for (int64_t h = 0; h < c.Hq; ++h) heads.push_back(slice(t, 1, h / (c.Hq / c.Hkv), h / (c.Hq / c.Hkv) + 1));
    return concat(heads, 1);
  };
  const Tensor S = matmul(x[0], transpose(repeat(x[1]), 2, 3)) * (1.0 / std::sqrt(static_cast<double>(c.d)));
  return matmul(softmax(S + M), repeat(x[2]));
}

Inputs mask_inputs(const MaskCase& c, uint64_t seed, Device device = Device::CPU) {
  Inputs x{random({c.B, c.Hq, c.Tq, c.d}, seed, DType::Float64, false),
           random({c.B, c.Hkv, c.Tk, c.d}, seed + 1, DType::Float64, false),
           random({c.B, c.Hkv, c.Tk, c.d}, seed + 2, DType::Float64, false)};
  for (Tensor& t : x) t = t.to(device).requires_grad_();
  return x;
}

// Z and the gradients of q, k, v from upstream R.
std::vector<Tensor> mask_outputs(const std::function<Tensor(const Inputs&)>& f, const Inputs& given, const Tensor& R) {
  Inputs x;
  for (const Tensor& t : given) x.push_back(t.detach().clone().requires_grad_());
  const Tensor Z = f(x);
  sum(Z * R).backward();
  return {Z.detach(), x[0].grad(), x[1].grad(), x[2].grad()};
}

}  // namespace

TEST_CASE("mask mods: each mask function equals softmax(S + M) with M written out (float64 ≤ 1e-12) — composed, dense, flash") {
  uint64_t seed = 100;
  double worst = 0;  // over every case, implementation, output and gradient
  for (const MaskCase& c : mask_cases()) {
    CAPTURE(c.name);
    const Inputs x = mask_inputs(c, seed += 10);
    const Tensor R = random({c.B, c.Hq, c.Tq, c.d}, seed + 5, DType::Float64, false);
    const std::vector<Tensor> expected = mask_outputs([&c](const Inputs& in) { return masked_reference(c, in); }, x, R);
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      const std::vector<Tensor> got =
          mask_outputs([&c, impl](const Inputs& in) { return attention(in[0], in[1], in[2], mask_spec(c, impl)); }, x, R);
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK_CLOSE(got[i], expected[i], 1e-12);
        worst = std::max(worst, ag::test::relative_error(got[i], expected[i]));
      }
    }
  }
  MESSAGE("worst relative error against softmax(S + M): " << worst);
}

TEST_CASE("mask mods: float64 gradcheck of q, k, v through flash with a document and a token tree mask") {
  MaskCase documents{.name = "documents", .causal = true, .Tq = 12, .Tk = 12, .d = 4};
  documents.masks.documents = Tensor::from_indices(packed_ids(12, {0, 5, 6, 9}), {12});
  MaskCase tree{.name = "tree", .Tq = 12, .Tk = 12, .d = 4};
  tree.masks.parents = Tensor::from_indices(tree_parents_of(12, 3), {12});
  tree.masks.tree_prefix = 3;
  uint64_t seed = 700;
  for (const MaskCase& c : {documents, tree}) {
    CAPTURE(c.name);
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      const GradcheckFn f = [&c, impl](const Inputs& in) { return attention(in[0], in[1], in[2], mask_spec(c, impl)); };
      CHECK_GRADCHECK(f, mask_inputs(c, seed += 10));
    }
  }
}

TEST_CASE("mask mods: a query with no visible key gets Z = 0 and no gradient — every implementation") {
  const int64_t T = 70;  // the empty rows sit in both of flash's query tiles
  std::vector<int64_t> adjacency(T * T, 0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) adjacency[i * T + j] = (i != 3 && i != 66) && (i + j) % 3 == 0;
  MaskCase c{.name = "adjacency with empty rows 3 and 66", .B = 1, .Tq = T, .Tk = T};
  c.masks.adjacency = Tensor::from_indices(adjacency, {T, T});
  const Inputs x = mask_inputs(c, 900);
  const Tensor R = random({c.B, c.Hq, T, c.d}, 905, DType::Float64, false);
  std::vector<std::vector<Tensor>> results;
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    results.push_back(
        mask_outputs([&c, impl](const Inputs& in) { return attention(in[0], in[1], in[2], mask_spec(c, impl)); }, x, R));
    const std::vector<Tensor>& got = results.back();
    for (const int64_t row : {3, 66})
      for (int64_t h = 0; h < c.Hq; ++h)
        for (const Tensor* t : {&got[0], &got[1]}) {  // Z and dQ
          const std::vector<double> values = slice(slice(*t, 1, h, h + 1), 2, row, row + 1).to_vector();
          for (const double value : values) CHECK(value == 0.0);
        }
    for (const Tensor& t : got)
      for (const double value : t.to_vector()) CHECK(std::isfinite(value));
  }
  for (size_t impl = 1; impl < results.size(); ++impl)
    for (size_t i = 0; i < results[0].size(); ++i) CHECK_CLOSE(results[impl][i], results[0][i], 1e-12);
}

TEST_CASE("mask mods: the same mask twice reuses its bytes, and a changed mask is evaluated anew") {
  MaskCase c{.name = "documents", .causal = true, .B = 1, .Tq = 20, .Tk = 20, .d = 4};
  std::vector<int64_t> ids = packed_ids(20, {0, 8});
  c.masks.documents = Tensor::from_indices(ids, {20});
  const Inputs x = mask_inputs(c, 1000);
  const Tensor first = attention(x[0], x[1], x[2], mask_spec(c, AttentionImpl::Flash)).detach();
  CHECK_CLOSE(attention(x[0], x[1], x[2], mask_spec(c, AttentionImpl::Flash)).detach(), first, 0.0);
  ids = packed_ids(20, {0, 13});  // the same shape, other documents: another block map
  c.masks.documents = Tensor::from_indices(ids, {20});
  c.sees = [ids](int64_t, int64_t, int64_t p, int64_t j) { return j <= p && ids[j] == ids[p]; };
  CHECK_CLOSE(attention(x[0], x[1], x[2], mask_spec(c, AttentionImpl::Flash)).detach(), masked_reference(c, x).detach(), 1e-12);
}

TEST_CASE_EVERY_DEVICE("mask mods: dense and flash on the device match the CPU (float64), a custom mask_mod refused off the CPU") {
  if (device == Device::CPU) return;  // the CPU's own cases are above
  uint64_t seed = 1200;
  for (const MaskCase& c : mask_cases()) {
    CAPTURE(c.name);
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      const GradcheckFn f = [&c, impl](const Inputs& in) { return attention(in[0], in[1], in[2], mask_spec(c, impl)); };
      const Inputs x = mask_inputs(c, seed += 10);
      if (c.masks.custom) {
        Inputs on_device;
        for (const Tensor& t : x) on_device.push_back(t.detach().to(device));
        CHECK(ag::test::contains(ag::test::error_of([&] { f(on_device); }),
                                 "a custom mask function (MaskMods::custom) is a C++ callable on the host: the CPU only"));
        continue;
      }
      ag::test::check_device_matches_cpu(device, f, x, 1e-10, DType::Float64);
    }
  }
}

TEST_CASE("mask mods: bad input names what is wrong") {
  MaskCase c{.name = "bad", .B = 2, .Tq = 6, .Tk = 6, .d = 4};
  const Inputs x = mask_inputs(c, 1300);
  const auto error = [&](auto&& edit, bool causal = false) {
    MaskCase e = c;
    e.causal = causal;
    edit(e.masks);
    return ag::test::error_of([&] { attention(x[0], x[1], x[2], mask_spec(e, AttentionImpl::Flash)); });
  };
  CHECK(ag::test::contains(error([](MaskMods& m) { m.parents = Tensor::from_indices({-1, 0, 1, 3, 2, 4}, {6}); }),
                           "token tree node 3 has parent 3, not earlier than the node"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.parents = Tensor::from_indices({-1, 0, 5, 1, 2, 4}, {6}); }),
                           "token tree node 2 has parent 5, not earlier than the node"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.parents = Tensor::from_indices({-1, 0, 1}, {3}); }),
                           "token tree parents [3] int64 are not int64 [Tk] = [6]"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.documents = Tensor::from_indices({0, 0, 1, 1, 1}, {5}); }),
                           "document ids [5] int64 are not int64 [Tk] or [B, Tk] = [6] or [2, 6]"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.documents = Tensor::from_indices(std::vector<int64_t>(18, 0), {3, 6}); }),
                           "document ids [3,6] int64 are not int64 [Tk] or [B, Tk]"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.adjacency = Tensor::zeros({6, 5}, DType::Float64); }),
                           "adjacency [6,5] float64 is not [Tq, Tk] = [6, 6]"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.adjacency = Tensor::zeros({3, 6, 6}, DType::Float64); }),
                           "adjacency [3,6,6] float64 is not [Tq, Tk] = [6, 6] or [B, Tq, Tk] = [2, 6, 6]"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.prefix = 7; }), "prefix-LM prefix 7 is outside [0, 6]"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.prefix = 2; }, true), "a prefix-LM mask"));
  CHECK(ag::test::contains(error([](MaskMods& m) { m.prefix = 2; }, true), "it needs causal = false"));
}

TEST_CASE("mask mods: an adjacency [B, Tq, Tk] equals B calls of one entry each with its [Tq, Tk] — every implementation") {
  const int64_t B = 3, T = 40;  // T past one flash tile on some implementations, causal and not
  MaskCase c{.name = "graphs", .B = B, .Tq = T, .Tk = T, .d = 4};
  std::vector<int64_t> graphs(B * T * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) graphs[(b * T + i) * T + j] = i == j || (i * (b + 3) + j * 5) % 11 < 2;
  c.masks.adjacency = Tensor::from_indices(graphs, {B, T, T});
  const Inputs x = mask_inputs(c, 1500);
  const Tensor R = random({B, c.Hq, T, c.d}, 1505, DType::Float64, false);
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      MaskCase all = c;
      all.causal = causal;
      const std::vector<Tensor> together =
          mask_outputs([&all, impl](const Inputs& in) { return attention(in[0], in[1], in[2], mask_spec(all, impl)); }, x, R);
      for (int64_t b = 0; b < B; ++b) {
        CAPTURE(b);
        MaskCase one = all;
        one.B = 1;
        one.masks.adjacency = Tensor::from_indices(
            std::vector<int64_t>(graphs.begin() + b * T * T, graphs.begin() + (b + 1) * T * T), {T, T});
        Inputs entry;
        for (const Tensor& t : x) entry.push_back(slice(t.detach(), 0, b, b + 1));
        const std::vector<Tensor> alone = mask_outputs(
            [&one, impl](const Inputs& in) { return attention(in[0], in[1], in[2], mask_spec(one, impl)); }, entry,
            slice(R, 0, b, b + 1));
        for (size_t i = 0; i < alone.size(); ++i) {
          CAPTURE(i);
          CHECK_CLOSE(slice(together[i], 0, b, b + 1), alone[i], 1e-12);
        }
      }
    }
  }
}

}  // namespace mask_mods_test
