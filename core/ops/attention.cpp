// attention(q, k, v, spec): the one contract (core/ops.h) and its dispatch to
// the attention functions; softmax attention and its three implementations here,
// linear attention in core/ops/linear_attention.cpp, ssd in core/ops/ssd.cpp,
// softmax over a sequence split across processes in core/ops/ring_attention.cpp.
// Softmax, per batch entry and query head, with M the mask (0 visible, −∞ hidden):
//   S = scale · Q Kᵀ,   A = softmax(S + M),   Z = A V
//
// Backward (docs/backprop.md, sections 10 and 21):
//   Z = AV            →  dV = Aᵀ dZ,   dA = dZ Vᵀ
//   A = softmax(S+M)  →  dS = A ∘ (dA − rowsum(dA ∘ A))   (0 where masked, as A is)
//   S = scale·QKᵀ     →  dQ = scale · dS K,   dK = scale · dSᵀ Q
// With grouped kv heads, a kv head's dK and dV sum the terms of every query
// head that read it. The mask is a constant: no gradient of its own. The
// scale (1/√d by default) keeps the scores' variance near 1 whatever d is.
//
//   composed: the formulas as ops (matmul, +M, softmax, matmul); each op's own
//             backward gives the gradient. The reference the others are tested against.
//   dense:    forms Sᵀ and Aᵀ [B, Hq, Tk, Tq] (key j's row holds its score with
//             every query; Aᵀ overwrites Sᵀ), saves Aᵀ, and runs the three lines
//             above as GEMMs and one softmax-backward kernel.
//   flash:    FlashAttention: tiles and the online softmax, never forming S or
//             A; saves only lse = log Σ_j exp(S_ij + M_ij), one number per row,
//             and recomputes P = exp(S − lse) tile by tile in the backward (the kernels:
//             core/cpu/attention.cpp, cuda/attention.cu).
//
// Score modifiers (ScoreMods, core/ops.h; docs/backprop.md §34): S' = mod(S) before the
// mask, u = S + table entries, S' = cap·tanh(f(u)/cap) with f the user's function (if
// any), and a sink logit in each row's denominator. Their backward: dU = dS' ∘ (1 −
// (S'/cap)²) ∘ f′(u), dQ and dK from dU as from dS, ∂L/∂table[h, e] = Σ dU over the
// pairs reading e (a fixed-order scatter-add), and ∂L/∂sink_h = −Σ_{b,i} exp(sink_h −
// lse_i) D_i with D_i = rowsum(dZ ∘ Z).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <cstring>
#include <type_traits>
#include <variant>

#include "core/counter_shifts.h"
#include "core/ops/attention_functions.h"
#include "cuda/graph.h"

namespace ag {

namespace {

std::string shapes_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "attention: q " + to_string(q.shape()) + ", k " + to_string(k.shape()) + ", v " + to_string(v.shape());
}

// What every function needs of its inputs: ranks, batch, widths, heads.
void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  detail::check_compatible("attention", {&q, &k, &v});
  const bool bthd = spec.layout == AttentionLayout::BTHD;
  const char* expected = bthd ? "q [B, Tq, Hq, d] and k, v [B, Tk, Hkv, d] (layout BTHD)"
                              : "q [B, Hq, Tq, d] and k, v [B, Hkv, Tk, d] (layout BHTD)";
  AG_CHECK(q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape() && k.size(0) == q.size(0) &&
               k.size(3) == q.size(3) && q.size(3) > 0,
           shapes_of(q, k, v) << ": expected " << expected);
  const int64_t Hq = detail::heads_of(q, spec.layout), Hkv = detail::heads_of(k, spec.layout);
  AG_CHECK(Hkv > 0 && Hq % Hkv == 0,
           shapes_of(q, k, v) << ": " << Hq << " query heads are not a multiple of " << Hkv << " kv heads");
  // A shared setting the function cannot take (not a misplaced parameter: each function's own are its type's).
  AG_CHECK(attention_function_traits(function_of(spec)).has_scores || spec.position != PositionEncoding::Alibi,
           shapes_of(q, k, v) << ": position alibi biases softmax attention's scores; " << name_of(function_of(spec))
                              << " attention has none (use rope or none)");
  // The bias −m_h·(p − j) penalises distance back in time; to keys after the query it would be a reward.
  AG_CHECK(spec.causal || spec.position != PositionEncoding::Alibi,
           shapes_of(q, k, v) << ": position alibi biases each score by its key's distance back from the query: "
                                 "it needs causal attention");
  if (spec.position == PositionEncoding::Rope) {
    AG_CHECK(q.size(3) % 2 == 0, shapes_of(q, k, v) << ": position rope rotates pairs of a head's dims: head size "
                                                    << q.size(3) << " is odd");
    AG_CHECK(spec.rope_base > 0 && std::isfinite(spec.rope_base),
             shapes_of(q, k, v) << ": rope_base " << spec.rope_base << " is not a positive number");
  }
}

// Decoding: k, v are the new positions, which the cache must have room for.
void check_decode(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  const LayerKVCache& cache = *spec.cache;
  AG_CHECK(spec.causal, shapes_of(q, k, v) << ": a KV cache needs causal attention (a new token would change old outputs)");
  AG_CHECK(!grad_enabled(), shapes_of(q, k, v) << ": a KV cache is for generation: run it under NoGradGuard");
  AG_CHECK(spec.layout == AttentionLayout::BTHD,
           shapes_of(q, k, v) << ": a KV cache holds BTHD rows ([B, T, H, d], as a module projects them)");
  const int64_t T_new = k.size(1);
  AG_CHECK(q.size(1) == T_new, shapes_of(q, k, v) << ": decoding takes one query per new key");
  AG_CHECK(cache.length >= 0 && (cache.length + T_new <= cache.capacity || attention_cache_rolls(spec)),
           "KV cache: positions " << cache.length + cache.rolled << " … " << cache.length + cache.rolled + T_new - 1
                                  << " do not fit in its " << cache.capacity
                                  << " (it rolls only for a window without random blocks, and without global keys under ALiBi)");
}

// --- score modifiers ------------------------------------------------------------------

// The kernels' view of `mods` (core/attention_math.h, ScoreModifiers), after checking
// each against the problem: pointers into the tensors' data, which the caller keeps alive.
ScoreModifiers describe_mods(const ScoreMods& mods, const Tensor& q, int64_t Hq, int64_t Tq, int64_t Tk,
                             const std::string& where) {
  ScoreModifiers m;
  if (mods.soft_cap) {
    const double cap = *mods.soft_cap;
    AG_CHECK(cap > 0 && std::isfinite(cap), where << ": soft_cap " << cap << " is not a positive number");
    m.soft_cap = cap;
  }
  // A learnable tensor of the modifiers: [Hq, n] (or [Hq]) in q's dtype, on q's device.
  const auto check_table = [&](const Tensor& t, const char* name, const char* expected) {
    AG_CHECK(t.dtype() == q.dtype() && t.device() == q.device(),
             where << ": " << name << " " << describe(t) << " is not in q's dtype and device (" << describe(q) << ")");
    AG_CHECK(t.size(0) == Hq && (t.dim() == 1 || t.size(1) > 0),
             where << ": " << name << " " << to_string(t.shape()) << " is not " << expected << " with Hq = " << Hq);
  };
  if (mods.sinks.defined()) {
    AG_CHECK(mods.sinks.dim() == 1, where << ": sinks " << to_string(mods.sinks.shape()) << " is not [Hq] = [" << Hq << "]");
    check_table(mods.sinks, "sinks", "[Hq]");
    m.sinks = mods.sinks.raw_data();
  }
  if (const RelativePositionBias& rel = mods.relative; rel.table.defined()) {
    AG_CHECK(rel.table.dim() == 2, where << ": relative bias table " << to_string(rel.table.shape())
                                         << " is not [Hq, num_buckets] with Hq = " << Hq);
    check_table(rel.table, "relative bias table", "[Hq, num_buckets]");
    const int64_t buckets = rel.table.size(1), per_direction = rel.bidirectional ? buckets / 2 : buckets;
    AG_CHECK(per_direction >= 2, where << ": relative bias table " << to_string(rel.table.shape()) << ": " << buckets
                                       << " buckets leave none for distances beyond 0 (at least "
                                       << (rel.bidirectional ? 4 : 2) << (rel.bidirectional ? ", bidirectional)" : ")"));
    AG_CHECK(rel.max_distance > per_direction / 2,
             where << ": relative bias max_distance " << rel.max_distance << " is not beyond the "
                   << per_direction / 2 << " distances its buckets hold exactly");
    m.relative = rel.table.raw_data();
    m.relative_buckets = buckets;
    m.max_distance = rel.max_distance;
    m.bidirectional = rel.bidirectional;
  }
  if (const IndexedBias& ind = mods.indexed; ind.table.defined()) {
    AG_CHECK(ind.table.dim() == 2, where << ": indexed bias table " << to_string(ind.table.shape())
                                         << " is not [Hq, n] with Hq = " << Hq);
    check_table(ind.table, "indexed bias table", "[Hq, n]");
    AG_CHECK(ind.index.defined() && ind.index.dtype() == DType::Int64 && ind.index.dim() == 2 &&
                 ind.index.size(0) == Tq && ind.index.size(1) == Tk && ind.index.device() == q.device(),
             where << ": indexed bias index " << (ind.index.defined() ? describe(ind.index) : std::string("(none)"))
                   << " is not int64 [Tq, Tk] = " << to_string(Shape{Tq, Tk}) << " on q's device");
    const int64_t n = ind.table.size(1);
    const Tensor host = ind.index.to(Device::CPU);
    const int64_t* index = host.data<int64_t>();
    for (int64_t e = 0; e < Tq * Tk; ++e)
      AG_CHECK(index[e] >= 0 && index[e] < n, where << ": indexed bias index[" << e / Tk << ", " << e % Tk << "] = "
                                                    << index[e] << " is outside its table's " << n << " entries [0, "
                                                    << n << ")");
    m.indexed = ind.table.raw_data();
    m.indexed_entries = n;
    m.index = ind.index.data<int64_t>();
    m.index_row = Tk;
  }
  if (mods.custom.value) {
    AG_CHECK(mods.custom.derivative, where << ": the custom score function has no derivative (ScoreFunction::derivative)");
    AG_CHECK(q.device() == Device::CPU,
             where << ": a custom score function is a C++ callable on the host: the CPU only (q is on " << name_of(q.device())
                   << ")");
    m.custom = &mods.custom;
  }
  return m;
}

// The modifiers' learnable tensors that are given, in the order their gradients follow dQ, dK, dV.
std::vector<Tensor> learnable_of(const ScoreMods& mods) {
  std::vector<Tensor> tensors;
  for (const Tensor* t : {&mods.sinks, &mods.relative.table, &mods.indexed.table})
    if (t->defined()) tensors.push_back(*t);
  return tensors;
}

// What a backward keeps of the modifiers: their values, not their graphs.
ScoreMods detached(ScoreMods mods) {
  for (Tensor* t : {&mods.sinks, &mods.relative.table, &mods.indexed.table})
    if (t->defined()) *t = t->detach();
  return mods;
}

// The backward's problem: the forward's, its custom score function read from the backward's own
// copy of the modifiers (the caller's spec, which the forward's pointed to, may be gone by then).
AttentionShape reading(AttentionShape shape, const ScoreMods& mods) {
  shape.mods.custom = mods.custom.value ? &mods.custom : nullptr;
  return shape;
}

// The gradients of learnable_of(mods), in its order, for dense and flash (composed's come from its ops;
// lse and Z are read only with sinks):
//   tables:  ∂L/∂table[h, e] = Σ_{b, i, j reading e} dU_bhij: dBias [B, Hq, E] (each batch entry's sums,
//            in the kernel's fixed order) summed over B, then cut into the relative and indexed tables' columns;
//   sinks:   ∂L/∂sink_h = −Σ_{b, i} p_sink(b, h, i) · D_bhi, p_sink = exp(sink_h − lse), D = rowsum(dZ ∘ Z)
//            (= Σ_j A_ij dA_ij: docs/backprop.md), in float64 as lse is.
std::vector<Tensor> mods_gradients(const ScoreMods& mods, const ScoreModifiers& kernel_mods, const Tensor& dBias,
                                   const Tensor& lse, const Tensor& dZ, const Tensor& Z, AttentionLayout layout) {
  std::vector<Tensor> grads;
  if (mods.sinks.defined()) {
    const int64_t Hq = mods.sinks.size(0);
    const Tensor D = detail::heads_first(sum(dZ * Z, 3, true), layout).to(DType::Float64);  // [B, Hq, Tq, 1]
    const Tensor p_sink = exp(mods.sinks.to(DType::Float64).reshape({1, Hq, 1}) - lse);      // [B, Hq, Tq]
    grads.push_back(neg(sum(sum(p_sink * D.reshape(lse.shape()), 2), 0)).to(mods.sinks.dtype()));
  }
  if (dBias.defined()) {
    const Tensor total = sum(dBias, 0);  // [Hq, E]
    const int64_t relative = kernel_mods.relative ? kernel_mods.relative_buckets : 0;
    if (kernel_mods.relative) grads.push_back(slice(total, 1, 0, relative));
    if (kernel_mods.indexed) grads.push_back(slice(total, 1, relative, relative + kernel_mods.indexed_entries));
  }
  return grads;
}

// The user's function on every score, U [B, Hq, Tq, Tk] -> value(U) in float64 (as the
// kernels call it), and its backward: dU = dValue ∘ derivative(U), saved from the forward.
Tensor score_function(const Tensor& U, const ScoreFunction& f, int64_t q_offset) {
  const int64_t Hq = U.size(1), Tq = U.size(2), Tk = U.size(3);
  const std::vector<double> u = U.to_vector();
  std::vector<double> value(u.size()), slope(u.size());
  for (size_t e = 0; e < u.size(); ++e) {
    const int64_t j = static_cast<int64_t>(e) % Tk, i = static_cast<int64_t>(e) / Tk % Tq,
                  h = static_cast<int64_t>(e) / (Tk * Tq) % Hq;
    value[e] = f.value(u[e], h, i + q_offset, j);
    slope[e] = f.derivative(u[e], h, i + q_offset, j);
  }
  const Tensor out = Tensor::from_vector(value, U.shape(), U.dtype());
  return record("score_function", {U}, out, [dvalue = Tensor::from_vector(slope, U.shape(), U.dtype())](
                                                const Tensor& dOut) -> Gradients { return {dOut * dvalue}; });
}

// Composed's S' and its softmax, from ops (their backward gives every gradient): the tables'
// biases gathered by embedding (whose backward is the deterministic scatter-add), tanh's cap,
// and the sinks as one more column of the softmax, dropped after it.
Tensor modified_scores(const Tensor& S, const ScoreMods& mods, const AttentionShape& shape) {
  const int64_t Tq = shape.Tq, Tk = shape.Tk;
  // table [Hq, n] read at index [Tq, Tk] -> [Hq, Tq, Tk], broadcast over B
  const auto gathered = [](const Tensor& table, const Tensor& index) {
    return permute(embedding(transpose(table, 0, 1), index), {2, 0, 1});
  };
  Tensor U = S;
  if (mods.relative.table.defined()) {
    std::vector<int64_t> buckets(Tq * Tk);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) buckets[i * Tk + j] = shape.mods.bucket(i + shape.mask.q_offset, j);
    U = U + gathered(mods.relative.table, Tensor::from_indices(buckets, {Tq, Tk}).to(S.device()));
  }
  if (mods.indexed.table.defined()) U = U + gathered(mods.indexed.table, mods.indexed.index);
  if (mods.custom.value) U = score_function(U, mods.custom, shape.mask.q_offset);
  if (!mods.soft_cap) return U;
  return tanh(U / *mods.soft_cap) * *mods.soft_cap;  // S' = cap·tanh(u/cap)
}
Tensor softmax_with_sinks(const Tensor& S, const Tensor& sinks) {
  if (!sinks.defined()) return softmax(S);
  const int64_t B = S.size(0), Hq = S.size(1), Tq = S.size(2), Tk = S.size(3);
  const Tensor column = expand(sinks.reshape({1, Hq, 1, 1}), {B, Hq, Tq, 1});  // sink_h in every row of head h
  return slice(softmax(concat({S, column}, 3)), 3, 0, Tk);
}

// --- mask functions -----------------------------------------------------------------------

// A mask function's bytes (evaluate_mask) as the kernels read them: on the host, and on the
// kernels' device (packed into int64 elements, the bytes in order), with the name the block
// map's cache knows them by.
struct MaskData {
  MaskBytes host;               // the functions given as bytes (none: no bytes)
  std::vector<int64_t> starts;  // packed documents as segment starts [start_batches, Tk] (none: empty)
  int64_t start_batches = 1;
  Tensor bytes_on_device, starts_on_device;  // CUDA only: both, uploaded once
  uint64_t id = 0;                           // 0: not cached (a custom mask_mod)
};

// `mask` reading `data` on the host (composed's M) or on the kernels' device.
AttentionMask with_mask_data(AttentionMask mask, const MaskData& data, bool on_host, int64_t Tq, int64_t Tk) {
  const bool device = !on_host && data.bytes_on_device.defined();
  if (!data.host.bytes.empty()) {
    mask.allowed = device ? reinterpret_cast<const uint8_t*>(data.bytes_on_device.data<int64_t>()) : data.host.bytes.data();
    mask.allowed_row = Tk;
    mask.allowed_head = data.host.heads > 1 ? Tq * Tk : 0;
    mask.allowed_batch = data.host.batches > 1 ? data.host.heads * Tq * Tk : 0;
  }
  if (!data.starts.empty()) {
    mask.segment_start = !on_host && data.starts_on_device.defined() ? data.starts_on_device.data<int64_t>() : data.starts.data();
    mask.segment_batch = data.start_batches > 1 ? Tk : 0;
  }
  mask.allowed_id = data.id;
  return mask;
}

// The bytes of softmax.masks for this problem, from a cache keyed by everything they depend on
// (their inputs' values, the geometry, the device), so that a training run evaluates each
// layout once; a custom mask_mod is evaluated on every call.
std::shared_ptr<const MaskData> mask_data(const MaskMods& masks, int64_t B, int64_t Hq, int64_t Tq, int64_t Tk,
                                          int64_t q_offset, Device device, const std::string& where) {
  const auto build = [&](uint64_t id) {
    auto data = std::make_shared<MaskData>();
    // Packed documents as segment starts when each document is one run of positions (O(T));
    // otherwise, and every other function, as bytes (O(Tq·Tk)).
    data->starts = document_starts(masks, B, Tq, Tk, q_offset, where);
    data->start_batches = masks.documents.defined() && masks.documents.dim() == 2 ? B : 1;
    MaskMods as_bytes = masks;
    if (!data->starts.empty()) as_bytes.documents = Tensor();
    if (as_bytes.any()) data->host = evaluate_mask(as_bytes, B, Hq, Tq, Tk, q_offset, where);
    data->id = id;
    if (device != Device::CPU && !data->host.bytes.empty()) {
      std::vector<int64_t> packed((data->host.bytes.size() + 7) / 8, 0);
      std::memcpy(packed.data(), data->host.bytes.data(), data->host.bytes.size());
      data->bytes_on_device = Tensor::from_indices(packed, {static_cast<int64_t>(packed.size())}).to(device);
    }
    if (device != Device::CPU && !data->starts.empty())
      data->starts_on_device = Tensor::from_indices(data->starts, {static_cast<int64_t>(data->starts.size())}).to(device);
    return std::shared_ptr<const MaskData>(std::move(data));
  };
  if (masks.custom) return build(0);
  // The key: geometry, then each input's values (a flag first, so that two inputs cannot alias).
  std::vector<int64_t> key{static_cast<int64_t>(device), Tq, Tk, q_offset, masks.prefix.value_or(-1), masks.tree_prefix};
  const auto add = [&key](const Tensor& t, int64_t flag) {
    key.push_back(t.defined() ? flag : 0);
    if (!t.defined()) return;
    for (const int64_t n : t.shape()) key.push_back(n);
    for (const double x : t.to_vector()) key.push_back(flag == 3 ? (x != 0) : static_cast<int64_t>(x));
  };
  add(masks.documents, 1);
  add(masks.parents, 2);
  add(masks.adjacency, 3);
  if (masks.documents.defined() && masks.documents.dim() == 2) key.push_back(B);
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, std::shared_ptr<const MaskData>> cache;
  static uint64_t next_id = 1;
  {
    const std::lock_guard lock(mutex);
    if (const auto found = cache.find(key); found != cache.end()) return found->second;
  }
  uint64_t id = 0;
  {
    const std::lock_guard lock(mutex);
    id = next_id++;
  }
  auto data = build(id);  // outside the lock
  const std::lock_guard lock(mutex);
  // A model's layouts are few; past this many, start again, unless a CUDA graph lives: one captured
  // with an entry reads its device copies at every replay, and a freed block would be handed out again.
  if (cache.size() >= 64 && cuda::live_graphs() == 0) cache.clear();
  return cache.emplace(std::move(key), std::move(data)).first->second;
}

// The problem as the softmax kernels see it, from the inputs, softmax's parameters and the spec.
// With mask functions, `masks` receives their bytes (which the shape points into: the caller keeps them).
AttentionShape describe_problem(const Tensor& q, const Tensor& k, const Tensor& v, const SoftmaxAttention& softmax,
                                const AttentionSpec& spec, std::shared_ptr<const MaskData>* masks = nullptr) {
  const AttentionLayout layout = spec.layout;
  const int64_t B = q.size(0), Hq = detail::heads_of(q, layout), Tq = detail::positions_of(q, layout), d = q.size(3);
  const int64_t Hkv = detail::heads_of(k, layout), kv_rows = detail::positions_of(k, layout);
  const int64_t Tk = softmax.kv_length.value_or(kv_rows);
  AG_CHECK(Tk >= 0 && Tk <= kv_rows, shapes_of(q, k, v) << ": kv_length " << Tk << " is outside [0, " << kv_rows << "]");
  check_sparse_pattern(softmax.pattern, shapes_of(q, k, v));
  AG_CHECK(spec.causal || !softmax.pattern.limited(), shapes_of(q, k, v) << ": a sparse pattern needs causal attention");
  const bool additive = softmax.score == AttentionScore::Additive;
  AG_CHECK(!additive || !softmax.scale,
           shapes_of(q, k, v) << ": additive scores (AttentionScore::Additive) take no scale: leave scale unset");
  AG_CHECK(std::isfinite(softmax.leaky_slope),
           shapes_of(q, k, v) << ": leaky_slope " << softmax.leaky_slope << " is not a finite number");
  AG_CHECK(softmax.dropout.p >= 0 && softmax.dropout.p < 1,
           shapes_of(q, k, v) << ": attention dropout p = " << softmax.dropout.p << " is outside [0, 1)");
  AG_CHECK(!spec.context || (!additive && !softmax.dropout.active()),
           shapes_of(q, k, v) << ": additive scores and attention dropout are not supported under context parallelism");
  const double scale = additive ? 1.0 : softmax.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  AG_CHECK(scale > 0 && std::isfinite(scale), shapes_of(q, k, v) << ": scale " << scale << " is not a positive number");
  AG_CHECK(!spec.context || !softmax.mods.any(),
           shapes_of(q, k, v) << ": score modifiers (ScoreMods) are not supported under context parallelism");
  AG_CHECK(!spec.context || !softmax.masks.any(),
           shapes_of(q, k, v) << ": mask functions (MaskMods) are not supported under context parallelism");
  AttentionShape shape{.B = B, .Hq = Hq, .Hkv = Hkv, .Tq = Tq, .Tk = Tk, .d = d, .scale = scale,
          .mask = {.causal = spec.causal, .q_offset = softmax.q_offset.value_or(Tk - Tq), .pattern = softmax.pattern,
                   .alibi_heads = spec.position == PositionEncoding::Alibi ? Hq : 0, .alibi_slopes = spec.alibi_slopes},
          .q = detail::head_strides(q, layout), .kv = detail::head_strides(k, layout),
          .mods = describe_mods(softmax.mods, q, Hq, Tq, Tk, shapes_of(q, k, v))};
  if (softmax.masks.any()) {
    const std::string where = shapes_of(q, k, v);
    AG_CHECK(masks, where << ": mask functions (MaskMods) are not supported here");
    AG_CHECK(!softmax.masks.prefix || !spec.causal,
             where << ": a prefix-LM mask shows the prefix's later keys to its earlier queries: it needs causal = false "
                      "(it is causal after the prefix itself)");
    AG_CHECK(!softmax.masks.custom || q.device() == Device::CPU,
             where << ": a custom mask function (MaskMods::custom) is a C++ callable on the host: the CPU only (q is on "
                   << name_of(q.device()) << ")");
    *masks = mask_data(softmax.masks, B, Hq, Tq, Tk, shape.mask.q_offset, q.device(), where);
    shape.mask = with_mask_data(shape.mask, **masks, false, Tq, Tk);
  }
  return shape;
}

// --- composed ------------------------------------------------------------------------

// GAT's additive scores as ops (docs/backprop.md §37): α = Σ_c Q [B, Hq, Tq, 1] and β = Σ_c K
// [B, Hq, 1, Tk] broadcast into S = LeakyReLU_a(α + β) [B, Hq, Tq, Tk]; each op's backward gives
// dQ_ic = Σ_j dS_ij·LeakyReLU′ and dK_jc = Σ_i dS_ij·LeakyReLU′.
Tensor additive_scores(const Tensor& Q, const Tensor& K, double slope) {
  return leaky_relu(sum(Q, 3, true) + transpose(sum(K, 3, true), 2, 3), slope);
}
// Z = Ã V with Ã = dropout(A) (AttentionDropout: ag::dropout on A [B, Hq, Tq, Tk] draws its counters).
Tensor dropped(const Tensor& A, const AttentionDropout& dropout) {
  return dropout.active() ? ag::dropout(A, dropout.p, true, dropout.generator) : A;
}

Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& shape, const SoftmaxAttention& softmax,
                const AttentionSpec& spec, const MaskData* masks, AttentionInternals* internals) {
  const ScoreMods& mods = softmax.mods;
  const int64_t Hq = shape.Hq, Tq = shape.Tq, Tk = shape.Tk;
  const double scale = shape.scale;
  const AttentionMask& mask = shape.mask;
  const AttentionLayout layout = spec.layout;
  // BTHD is swapped to heads first and GQA's kv heads repeated, as copies (dense and flash read
  // both in place); so are the first Tk rows of a longer cache.
  const auto heads_first = [layout](const Tensor& t) { return detail::heads_first(t, layout); };
  const auto used_rows = [layout, Tk](const Tensor& t) {
    const int64_t t_dim = layout == AttentionLayout::BTHD ? 1 : 2;
    return t.size(t_dim) == Tk ? t : slice(t, t_dim, 0, Tk);
  };
  const Tensor Q = heads_first(q), K = detail::repeat_kv_heads(heads_first(used_rows(k)), Hq),
               V = detail::repeat_kv_heads(heads_first(used_rows(v)), Hq);
  Tensor S = softmax.score == AttentionScore::Additive ? additive_scores(Q, K, softmax.leaky_slope)  // [B, Hq, Tq, Tk]
                                                       : matmul(Q, transpose(K, 2, 3)) * scale;
  if (shape.mods.changes_scores()) S = modified_scores(S, mods, shape);        // S' = mod(S)
  // M [Tq, Tk] broadcasts over batch and heads; random blocks and ALiBi's slopes differ by head: M [Hq, Tq, Tk]
  const bool per_head = mask.pattern.per_head() || mask.alibi_heads > 0;
  if (masks) {
    // A mask function's M [Bm, Hm, Tq, Tk] (by batch entry and head where it differs), from its
    // bytes on the host. A row it leaves with no visible key would be all −∞ (softmax's 0/0):
    // that row of M becomes 0 and of A is multiplied by 0, so that Z = 0 there with no gradient.
    const AttentionMask host_mask = with_mask_data(mask, *masks, true, Tq, Tk);
    const int64_t heads = per_head || masks->host.heads > 1 ? Hq : 1;
    const int64_t batches = std::max(masks->host.batches, masks->start_batches);
    std::vector<double> m = attention_mask(host_mask, Tq, Tk, DType::Float64, Device::CPU, heads, batches).to_vector();
    std::vector<double> seen(batches * heads * Tq, 1.0);
    bool empty_rows = false;
    for (int64_t row = 0; row < batches * heads * Tq; ++row) {
      double* mr = m.data() + row * Tk;
      if (std::any_of(mr, mr + Tk, [](double x) { return x != -std::numeric_limits<double>::infinity(); })) continue;
      std::fill_n(mr, Tk, 0.0);
      seen[row] = 0.0;
      empty_rows = true;
    }
    S = S + Tensor::from_vector(m, {batches, heads, Tq, Tk}, S.dtype()).to(S.device());
    Tensor A = softmax_with_sinks(S, mods.sinks);
    if (empty_rows) A = A * Tensor::from_vector(seen, {batches, heads, Tq, 1}, S.dtype()).to(S.device());
    if (internals) internals->probabilities = A.detach();
    return heads_first(matmul(dropped(A, softmax.dropout), V));  // Z
  }
  if (mask.causal) S = S + attention_mask(mask, Tq, Tk, S.dtype(), S.device(), per_head ? Hq : 1);
  const Tensor A = softmax_with_sinks(S, mods.sinks);
  if (internals) internals->probabilities = A.detach();
  return heads_first(matmul(dropped(A, softmax.dropout), V));  // Z
}

// dK or dV for K or V: zero in the rows after Tk (a cache's unused rows), which no kernel writes.
Tensor kv_gradient(const Tensor& kv, const AttentionShape& shape) {
  const bool whole = kv.numel() == shape.B * shape.Hkv * shape.Tk * shape.d;
  return whole ? detail::empty_like(kv) : Tensor::zeros(kv.shape(), kv.dtype(), kv.device());
}

// --- dense ---------------------------------------------------------------------------

using detail::GemmOperand;

// The matrix (b, h) of a per-head operand, at h or at h's kv head.
int64_t head_offset(const GemmOperand& o, int64_t b, int64_t h, int64_t group) {
  return o.heads.at(b - o.first_batch, o.by_kv_head ? h / group : h, 0);
}

// The batch entries [first, first + count): dense runs its kernels on a few at a time.
struct BatchRange {
  int64_t first, count;
};

// One per-head product's sizes: C_h [M, N] = alpha · op(X_h) [M, K] · op(Y_h) [K, N].
struct HeadProductSize {
  int64_t M, N, K;
  double alpha;
};

// For every batch entry b of `batches` and query head h:  C_h = alpha · op(X_h) op(Y_h),
// each operand read at h or at h's kv head. When C is indexed by the kv head
// and X, Y by the query head, the group's products are summed into C.
// The GEMMs go one per head, or as one call batched over the heads, a group
// per batch entry.
void head_product(const AttentionShape& shape, BatchRange batches, const GemmOperand& x, const GemmOperand& y,
                  Tensor& c_tensor, const GemmOperand& c, const HeadProductSize& size) {
  const int64_t group = shape.group();
  kernel::GemmShape s{1, size.M, size.N, size.K};
  s.trans_a = x.transposed;
  s.trans_b = y.transposed;
  s.lda = x.heads.row;
  s.ldb = y.heads.row;
  s.ldc = c.heads.row;
  s.alpha = size.alpha;
  if (group == 1) {  // every operand is indexed the same way: a batch over the heads, a group per batch entry
    s.batch = shape.Hq;
    s.groups = batches.count;
    s.a_batch_stride = x.heads.head;
    s.b_batch_stride = y.heads.head;
    s.c_batch_stride = c.heads.head;
    s.a_group_stride = x.heads.batch;
    s.b_group_stride = y.heads.batch;
    s.c_group_stride = c.heads.batch;
    s.a_offset = head_offset(x, batches.first, 0, group);
    s.b_offset = head_offset(y, batches.first, 0, group);
    s.c_offset = head_offset(c, batches.first, 0, group);
    kernel::gemm(s, x.data, y.data, c_tensor);
    return;
  }
  const bool sum_group = c.by_kv_head && !x.by_kv_head;
  for (int64_t b = batches.first; b < batches.first + batches.count; ++b)
    for (int64_t h = 0; h < shape.Hq; ++h) {
      s.a_offset = head_offset(x, b, h, group);
      s.b_offset = head_offset(y, b, h, group);
      s.c_offset = head_offset(c, b, h, group);
      s.beta = sum_group && h % group != 0 ? 1.0 : 0.0;
      kernel::gemm(s, x.data, y.data, c_tensor);
    }
}

// Dense runs its products and softmax a few batch entries at a time, so that a
// chunk's scores (S, then A; dA, then dS) and its rows of Q, K, V and dZ are
// still in the core's L2 cache when the next kernel reads them, and the
// backward's dS needs one chunk's memory: the attention GEMMs lose less to the
// rest of the step by chunks than over the whole batch at once
// (docs/performance.md). Chunks hold at least kMinChunk batch
// entries, so that a chunk's softmax is still work enough for the threads
// (core/cpu/loops.h: kParallelGrain). A GPU takes the whole batch at once: its
// L2 holds tens of megabytes, and each chunk would cost launches of kernels
// too small to fill it (16 chunks a layer and pass at nanoGPT's size).
constexpr int64_t kChunkBytes = 512 << 10;
constexpr int64_t kMinChunk = 4;

// Batch entries per chunk (at most B) for operands like `q`.
int64_t batch_chunk(const AttentionShape& s, const Tensor& q) {
  if (q.device() == Device::CUDA) return s.B;
  const int64_t scores = 2 * s.Hq * s.Tq * s.Tk, rows = 2 * (s.Hq * s.Tq + 2 * s.Hkv * s.Tk) * s.d;
  const auto element_size = static_cast<int64_t>(dtype_size(q.dtype()));
  return std::min(s.B, std::max(kMinChunk, kChunkBytes / ((scores + rows) * element_size)));
}

template <class Body> void for_batch_chunks(int64_t B, int64_t chunk, Body&& body) {
  for (int64_t first = 0; first < B; first += chunk) body(BatchRange{first, std::min(chunk, B - first)});
}

// Dense keeps its scores transposed, Sᵀ [B, Hq, Tk, Tq] (key j's row holds its
// score with every query; core/kernels.inc): the softmax then runs down columns,
// vectorised across queries (core/cpu/attention.cpp), and each product reads
// Aᵀ or A through the GEMM's transpose flag, at no cost.
// GAT's pieces (SoftmaxAttention::score, ::dropout; docs/backprop.md §37): additive scores
// formed by their own kernel in place of the product KQᵀ, and, with dropout, Ãᵀ beside Aᵀ
// (Z = ÃV; the backward reruns the dropout kernel on dÃ: dA = dÃ ∘ keep/(1 − p)).
struct DenseGat {
  bool additive = false;
  double slope = 0;
  bool dropout = false;
  double p = 0;
  uint64_t seed = 0, offset = 0;
  const uint64_t* shift = nullptr;  // inside a captured CUDA graph (core/counter_shifts.h)
};
Tensor dense(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& shape, const SoftmaxAttention& softmax,
             AttentionLayout layout, AttentionInternals* internals) {
  const ScoreMods& mods = softmax.mods;
  DenseGat gat{.additive = softmax.score == AttentionScore::Additive, .slope = softmax.leaky_slope,
               .dropout = softmax.dropout.active(), .p = softmax.dropout.p};
  if (gat.dropout) {  // the counters ag::dropout would draw for A [B, Hq, Tq, Tk]
    Generator& g = softmax.dropout.generator ? *softmax.dropout.generator : default_generator();
    gat.shift = counter_shift(g, q.device());
    gat.seed = g.seed();
    gat.offset = g.advance(static_cast<uint64_t>(shape.B * shape.Hq * shape.Tq * shape.Tk));
  }
  // (a mask function's bytes, which shape.mask points into, are kept by the caller: no backward reads them)
  // Named copies, not a structured binding: clang 14 lets no lambda capture one.
  const int64_t B = shape.B, Hq = shape.Hq, Tq = shape.Tq, Tk = shape.Tk, d = shape.d;
  const double scale = shape.scale;
  const AttentionMask& mask = shape.mask;
  const HeadStrides q_at = shape.q, kv_at = shape.kv;
  const HeadStrides scores_at{Hq * Tk * Tq, Tk * Tq, Tq};  // Sᵀ, Aᵀ, dAᵀ, dSᵀ [B, Hq, Tk, Tq]
  // A chunk's rows of a [B, Hq, Tk, Tq] or [B, Hq, Tq] tensor (contiguous).
  const auto chunk_of = [](const Tensor& t, BatchRange r) {
    Shape shape = t.shape();
    shape[0] = r.count;
    return t.view(r.first * (t.numel() / t.size(0)), shape);
  };
  Tensor A = detail::empty_as({B, Hq, Tk, Tq}, q);  // Aᵀ
  // Score modifiers (shape.mods): S'ᵀ = mod(Sᵀ) in place; under a cap or a custom function the
  // scores Sᵀ are kept (S_raw) and S' written into Aᵀ: the backward's chain factor ∂S'/∂u reads them.
  const bool modifies = shape.mods.changes_scores(), chain = shape.mods.has_chain();
  const Tensor S_raw = chain ? detail::empty_as({B, Hq, Tk, Tq}, q) : Tensor();
  Tensor scores = chain ? S_raw : A;  // where the product writes Sᵀ
  // lse for the caller and for the sinks' gradient: the backward needs A alone otherwise.
  Tensor lse = internals || mods.sinks.defined() ? Tensor::empty({B, Hq, Tq}, DType::Float64, q.device()) : Tensor();
  Tensor Z = detail::empty_like(q);
  const Tensor A_dropped = gat.dropout ? detail::empty_as({B, Hq, Tk, Tq}, q) : A;  // Ãᵀ (A itself without dropout)
  for_batch_chunks(B, batch_chunk(shape, q), [&](BatchRange r) {
    if (gat.additive) {
      Tensor S_r = chunk_of(scores, r);
      kernel::attention_additive_scores(q, k, shape, gat.slope, r.first, S_r);  // Sᵀ = LeakyReLU(α + β)
    } else {
      head_product(shape, r, {.data = k, .heads = kv_at, .by_kv_head = true}, {.data = q, .transposed = true, .heads = q_at},
                   scores, {.data = scores, .heads = scores_at}, {.M = Tk, .N = Tq, .K = d, .alpha = scale});  // Sᵀ = scale·KQᵀ
    }
    Tensor A_r = chunk_of(A, r), lse_r = lse.defined() ? chunk_of(lse, r) : Tensor();
    if (modifies) kernel::attention_score_mods(chunk_of(scores, r), shape, A_r);  // S' = mod(S), into Aᵀ
    kernel::attention_softmax(A_r, mask.at_batch(r.first), mods.sinks, A_r, lse_r);  // A = softmax(S' + M), in place of S'ᵀ
    if (gat.dropout) {
      Tensor A_dropped_r = chunk_of(A_dropped, r);
      kernel::attention_dropout(A_r, A_r, gat.p, gat.seed, gat.offset, gat.shift, r.first, A_dropped_r);  // Ã = A ∘ keep/(1 − p)
    }
    head_product(shape, r, {.data = A_dropped, .transposed = true, .heads = scores_at},
                 {.data = v, .heads = kv_at, .by_kv_head = true}, Z, {.data = Z, .heads = q_at},
                 {.M = Tq, .N = d, .K = Tk, .alpha = 1.0});  // Z = ÃV
  });
  if (internals) *internals = {permute(A.detach(), {0, 1, 3, 2}), lse};  // A [B, Hq, Tq, Tk] for the user

  std::vector<Tensor> inputs{q, k, v};
  for (const Tensor& t : learnable_of(mods)) inputs.push_back(t);
  return record("attention", inputs, Z,
                [Q = q.detach(), K = k.detach(), V = v.detach(), A, A_dropped, S_raw, sink_lse = mods.sinks.defined() ? lse : Tensor(),
                 Z_out = mods.sinks.defined() ? Z.detach() : Tensor(), mods = detached(mods), layout,
                 forward_shape = shape, scores_at, chunk_of, gat](const Tensor& dZ) -> Gradients {
                  const AttentionShape shape = reading(forward_shape, mods);
                  const int64_t Hq = shape.Hq, Tq = shape.Tq, Tk = shape.Tk, d = shape.d;
                  const double scale = shape.scale;
                  const HeadStrides q_at = shape.q, kv_at = shape.kv;
                  Tensor dV = kv_gradient(V, shape), dQ = detail::empty_like(Q), dK = kv_gradient(K, shape);
                  // dAᵀ, then dSᵀ in its place: one chunk's worth, reused by every chunk (it stays in cache).
                  const int64_t chunk = batch_chunk(shape, Q);
                  Tensor dS = detail::empty_as({chunk, Hq, Tk, Tq}, A);
                  // The tables' sums per batch entry and head (attention_score_mods_backward)
                  Tensor dBias = shape.mods.has_tables() ? detail::empty_as({shape.B, Hq, shape.mods.bias_entries()}, A)
                                                         : Tensor();
                  for_batch_chunks(shape.B, chunk, [&](BatchRange r) {
                    Tensor dS_r = chunk_of(dS, {0, r.count});
                    const GemmOperand dS_at{.data = dS, .heads = scores_at, .first_batch = r.first},
                        dS_transposed{.data = dS, .transposed = true, .heads = scores_at, .first_batch = r.first};
                    const GemmOperand Q_at{.data = Q, .heads = q_at}, dZ_at{.data = dZ, .heads = q_at},
                        K_at{.data = K, .heads = kv_at, .by_kv_head = true}, V_at{.data = V, .heads = kv_at, .by_kv_head = true};
                    // Z = AV
                    head_product(shape, r, V_at, {.data = dZ, .transposed = true, .heads = q_at}, dS, dS_at,
                                 {.M = Tk, .N = Tq, .K = d, .alpha = 1.0});  // dÃᵀ = V dZᵀ (dAᵀ without dropout)
                    // Ã = A ∘ keep/(1 − p)  →  dA = dÃ ∘ keep/(1 − p): the same kernel, the same counters
                    if (gat.dropout) kernel::attention_dropout(dS_r, chunk_of(A, r), gat.p, gat.seed, gat.offset, gat.shift, r.first, dS_r);
                    // A = softmax(S + M). It reads Aᵀ's chunk in order, so the product below finds it in cache.
                    kernel::attention_softmax_backward(chunk_of(A, r), dS_r, dS_r);  // dS = A ∘ (dA − rowsum(dA ∘ A)), in place of dAᵀ
                    // S' = mod(S)  →  dU = dS ∘ ∂S'/∂u in place, and the tables' sums
                    if (shape.mods.changes_scores()) {
                      Tensor dBias_r = dBias.defined() ? chunk_of(dBias, r) : Tensor();
                      kernel::attention_score_mods_backward(dS_r, S_raw.defined() ? chunk_of(S_raw, r) : Tensor(), shape,
                                                            dS_r, dBias_r);
                    }
                    head_product(shape, r, {.data = A_dropped, .heads = scores_at}, dZ_at, dV,
                                 {.data = dV, .heads = kv_at, .by_kv_head = true},
                                 {.M = Tk, .N = d, .K = Tq, .alpha = 1.0});  // dV = Ãᵀ dZ
                    if (gat.additive) {  // S = LeakyReLU(α + β)  →  dQ_ic = Σ_j g_ij, dK_jc = Σ_i g_ij
                      kernel::attention_additive_scores_backward(Q, K, dS_r, shape, gat.slope, r.first, dQ, dK);
                      return;
                    }
                    // Sᵀ = scale·KQᵀ
                    head_product(shape, r, dS_transposed, K_at, dQ, {.data = dQ, .heads = q_at},
                                 {.M = Tq, .N = d, .K = Tk, .alpha = scale});  // dQ = scale·dS K
                    head_product(shape, r, dS_at, Q_at, dK, {.data = dK, .heads = kv_at, .by_kv_head = true},
                                 {.M = Tk, .N = d, .K = Tq, .alpha = scale});  // dK = scale·dSᵀ Q
                  });
                  Gradients grads{dQ, dK, dV};
                  for (Tensor& g : mods_gradients(mods, shape.mods, dBias, sink_lse, dZ, Z_out, layout)) grads.push_back(g);
                  return grads;
                });
}

// --- flash ---------------------------------------------------------------------------

Tensor flash(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& shape, const ScoreMods& mods,
             AttentionLayout layout, std::shared_ptr<const MaskData> masks, AttentionInternals* internals) {
  Tensor Z = detail::empty_like(q);
  Tensor lse = Tensor::empty({shape.B, shape.Hq, shape.Tq}, DType::Float64, q.device());
  kernel::flash_attention(q, k, v, shape, Z, lse);  // the score modifiers read on the fly (shape.mods)
  if (internals) internals->log_sum_exp = lse;

  // Saves lse (for P = exp(S − lse)) besides the inputs: O(T), never O(T²).
  std::vector<Tensor> inputs{q, k, v};
  for (const Tensor& t : learnable_of(mods)) inputs.push_back(t);
  return record("attention", inputs, Z,
                [Q = q.detach(), K = k.detach(), V = v.detach(), lse, Z_out = mods.sinks.defined() ? Z.detach() : Tensor(),
                 mods = detached(mods), layout, forward_shape = shape,
                 masks = std::move(masks)](const Tensor& dZ) -> Gradients {  // masks: the bytes shape.mask reads
                  const AttentionShape shape = reading(forward_shape, mods);
                  Tensor dQ = detail::empty_like(Q), dK = kv_gradient(K, shape), dV = kv_gradient(V, shape);
                  Tensor dBias = shape.mods.has_tables() ? detail::empty_as({shape.B, shape.Hq, shape.mods.bias_entries()}, Q)
                                                         : Tensor();
                  kernel::flash_attention_backward(Q, K, V, lse, dZ, Tensor(), shape, false, dQ, dK, dV, dBias);
                  Gradients grads{dQ, dK, dV};
                  for (Tensor& g : mods_gradients(mods, shape.mods, dBias, lse, dZ, Z_out, layout)) grads.push_back(g);
                  return grads;
                });
}

// Makes room for T_new positions in a full cache that rolls (attention_cache_rolls): the
// oldest window rows go, the first G (global) rows and the newest stay. Row r ≥ G
// then holds position r + rolled, and the queries sit after the last row as
// before (q_offset = length): every distance p − j of a key a query sees is
// what it was, and so are the mask and the scores.
void roll(LayerKVCache& cache, int64_t T_new, const SparsePattern& pattern) {
  const int64_t kept = cache.capacity - T_new, G = pattern.global, drop = cache.length - kept;
  AG_CHECK(cache.capacity >= rolling_cache_capacity(pattern, T_new),
           "KV cache: " << cache.capacity << " positions cannot hold " << G << " global keys, the "
                        << pattern.window * pattern.dilation - 1 << " positions the window spans before a query and "
                        << T_new << " new ones");
  const int64_t B = cache.k.size(0), width = cache.k.size(2) * cache.k.size(3), moved = cache.length - G - drop;
  const kernel::StridedView from{0, {moved * width, width, 1}}, to{G * width, {cache.capacity * width, width, 1}};
  for (Tensor* rows : {&cache.k, &cache.v}) {
    const Tensor newest = slice(*rows, 1, G + drop, cache.length);  // a copy: the rows overlap their new place
    kernel::copy_strided(newest, from, *rows, to, {B, moved, width});
  }
  cache.length = kept;
  cache.rolled += drop;
}

// Softmax attention by softmax.impl. Decoding, the new keys and values are
// written into the cache's rows (allocated for its capacity on the first call;
// rolled first if it is full) and the queries read every row written so far in
// place (kv_length).
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SoftmaxAttention& softmax,
                         const AttentionSpec& spec, AttentionInternals* internals) {
  if (spec.context)
    return detail::ring_attention(q, k, v, describe_problem(q, k, v, softmax, spec), softmax, spec, internals);
  if (spec.cache) {
    LayerKVCache& cache = *spec.cache;
    // Mask functions index key positions, which a cache's rows are while it has not rolled (a token
    // tree's nodes, MaskMods::parents with tree_prefix = the cached prefix; documents' ids per row).
    AG_CHECK(!softmax.masks.any() || (cache.rolled == 0 && cache.length + k.size(1) <= cache.capacity),
             "KV cache: mask functions (MaskMods) read key positions as the cache's rows, which a cache that rolls "
             "no longer holds (" << cache.length + cache.rolled << " positions taken, " << cache.capacity
                                 << " held, " << k.size(1) << " new)");
    const int64_t B = k.size(0), T_new = k.size(1), Hkv = k.size(2), d = k.size(3), width = Hkv * d;
    const Shape rows{B, cache.capacity, Hkv, d};
    if (!cache.k.defined()) {
      cache.k = Tensor::zeros(rows, k.dtype(), k.device());
      cache.v = Tensor::zeros(rows, k.dtype(), k.device());
    }
    AG_CHECK(cache.k.shape() == rows && cache.k.dtype() == k.dtype() && cache.k.device() == k.device(),
             "KV cache: " << describe(cache.k) << " is not " << to_string(rows) << " in the new keys' dtype and device");
    if (cache.length + T_new > cache.capacity) roll(cache, T_new, softmax.pattern);  // check_decode: it may
    // A plain copy, untracked by autograd: the op reads the rows afterwards in place.
    const kernel::StridedView from{0, {T_new * width, width, 1}},
        to{cache.length * width, {cache.capacity * width, width, 1}};
    kernel::copy_strided(k, from, cache.k, to, {B, T_new, width});
    kernel::copy_strided(v, from, cache.v, to, {B, T_new, width});
    AttentionSpec over_cache = spec;
    over_cache.cache = nullptr;
    SoftmaxAttention over_rows = softmax;
    over_rows.kv_length = cache.length + T_new;  // query i sits at position length + i (bottom-right aligned)
    return softmax_attention(q, cache.k, cache.v, over_rows, over_cache, internals);
  }
  if (softmax.masks.edges.defined()) return detail::edge_attention(q, k, v, softmax, spec, internals);  // O(E·d)
  std::shared_ptr<const MaskData> masks;
  const AttentionShape shape = describe_problem(q, k, v, softmax, spec, &masks);
  switch (softmax.impl) {
    case AttentionImpl::Composed: return composed(q, k, v, shape, softmax, spec, masks.get(), internals);
    case AttentionImpl::Dense: return dense(q, k, v, shape, softmax, spec.layout, internals);
    case AttentionImpl::Flash:
      AG_CHECK(softmax.score == AttentionScore::Dot && !softmax.dropout.active(),
               shapes_of(q, k, v) << ": additive scores and attention dropout are computed by the composed and dense "
                                     "implementations (impl composed or dense); flash does not support them");
      return flash(q, k, v, shape, softmax.mods, spec.layout, masks, internals);
  }
  throw Error("attention: unknown implementation");
}

// What the rest of the project needs to know of each attention function, keyed
// by AttentionFunction for the places that have only its name (a model's
// options, a checkpoint). attention() itself tells the functions apart by
// their parameters' type (its std::visit, below).
struct AttentionFunctionEntry {
  AttentionFunction function;
  AttentionFunctionTraits traits;
  int64_t (*forward_flops)(FeatureMap map, int64_t features, int64_t B, int64_t H, int64_t T, int64_t d);
};
constexpr AttentionFunctionEntry kAttentionFunctions[] = {
    {.function = AttentionFunction::Softmax,
     .traits = {.has_scores = true, .weights = "A = softmax(S + M)", .weights_sum_to_one = true, .cache_holds = "KV cache"},
     // S = QKᵀ and Z = AV: all T×T entries of every head (the causal mask skips no arithmetic)
     .forward_flops = [](FeatureMap, int64_t, int64_t B, int64_t H, int64_t T, int64_t d) { return 2 * 2 * B * H * T * T * d; }},
    {.function = AttentionFunction::Linear,
     .traits = {.has_scores = false, .weights = "the weights linear attention implies, φ(q)·φ(k) / Σ",
                .weights_sum_to_one = true,
                .cache_holds = "recurrent state in the KV cache"},
     // the state Σ φ(k_j)[v_j, 1]ᵀ and its readout φ(q_i)ᵀ·state, plus FAVOR+'s projections of q and k
     .forward_flops = [](FeatureMap map, int64_t r, int64_t B, int64_t H, int64_t T, int64_t d) {
       return B * H * (2 * 2 * T * r * (d + 1) + (map == FeatureMap::Favor ? 2 * 2 * T * r * d : 0));
     }},
    {.function = AttentionFunction::Ssd,
     .traits = {.has_scores = false, .weights = "the weights ssd implies, exp(σ)·(q·k)·Δ (+ D on the diagonal)",
                .weights_sum_to_one = false,
                .cache_holds = "recurrent state in the KV cache"},
     // per position and head, in chunks of Q: the visible half of the chunk's (q·k) and its weighted
     // sum of v (Q + 1 of d each), the state's readout and its update (d·d each)
     .forward_flops = [](FeatureMap, int64_t, int64_t B, int64_t H, int64_t T, int64_t d) {
       return B * H * T * 2 * ((kDefaultAttentionChunk + 1) * d + 2 * d * d);
     }},
    // Not an attention function (kFirstOwnMixer): its own op, lstm(); it forms no weights over positions.
    {.function = AttentionFunction::Lstm,
     .traits = {.has_scores = false, .weights = "none: an LSTM forms no weights over positions",
                .weights_sum_to_one = false,
                .cache_holds = "(h, c) in the KV cache"},
     // per position, C = H·d: the gates' two GEMMs, x_t W_ih and h_{t−1} W_hh ([C]·[C, 4C] each)
     .forward_flops = [](FeatureMap, int64_t, int64_t B, int64_t H, int64_t T, int64_t d) {
       return 2 * 2 * B * T * (H * d) * 4 * (H * d);
     }},
    // Not an attention function: its own op, s4d(); its weights over positions are one kernel K
    // per channel, A_ij = K_{i−j}, the same for every input (docs/backprop.md §33).
    {.function = AttentionFunction::S4,
     .traits = {.has_scores = false,
                .weights = "the kernel K each channel convolves with, A_ij = K_{i−j}, the same for every input",
                .weights_sum_to_one = false,
                .cache_holds = "the modes' state in the KV cache"},
     // C = H·d: W_O's GEMM ([C]·[C, C] per position) and, per channel of each sequence, the FFT
     // convolution: two real transforms of 2T points and their inverse, 5·n·log2(n) each (K's own
     // transform and its generation, C·N/2·T complex products, are once per step and left out)
     .forward_flops = [](FeatureMap, int64_t, int64_t B, int64_t H, int64_t T, int64_t d) {
       int64_t log2_n = 0;
       while ((int64_t{1} << log2_n) < 2 * T) ++log2_n;
       return 2 * B * T * (H * d) * (H * d) + B * (H * d) * 2 * 5 * (int64_t{1} << log2_n) * log2_n;
     }},
};

// The visitor of attention(): one lambda per alternative of AttentionParams.
template <class... Cases> struct Overloaded : Cases... {
  using Cases::operator()...;
};
template <class... Cases> Overloaded(Cases...) -> Overloaded<Cases...>;

// Z from q, k, v by the spec's function: the one place that tells the functions apart.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec, AttentionInternals* internals) {
  return std::visit(
      Overloaded{[&](const SoftmaxAttention& softmax) { return softmax_attention(q, k, v, softmax, spec, internals); },
                 [&](const LinearAttention& linear) { return detail::linear_attention(q, k, v, linear, spec, internals); },
                 [&](const SsdAttention& ssd) { return detail::ssd_attention(q, k, v, ssd, spec, internals); }},
      spec.function);
}

const AttentionFunctionEntry& entry_of(AttentionFunction function) {
  for (const AttentionFunctionEntry& entry : kAttentionFunctions)
    if (entry.function == function) return entry;
  throw Error("attention: function " + std::to_string(static_cast<int>(function)) + " has no entry");
}

}  // namespace

namespace detail {

int64_t heads_of(const Tensor& t, AttentionLayout layout) { return t.size(layout == AttentionLayout::BTHD ? 2 : 1); }
int64_t positions_of(const Tensor& t, AttentionLayout layout) { return t.size(layout == AttentionLayout::BTHD ? 1 : 2); }

// Row t of head h of batch entry b starts at b·batch + h·head + t·row; a row's w entries follow.
HeadStrides head_strides(const Tensor& t, AttentionLayout layout) {
  const int64_t w = t.size(3), H = heads_of(t, layout), T = positions_of(t, layout);
  return layout == AttentionLayout::BTHD ? HeadStrides{T * H * w, w, H * w} : HeadStrides{H * T * w, T * w, w};
}

Tensor heads_first(const Tensor& t, AttentionLayout layout) {
  return layout == AttentionLayout::BTHD ? permute(t, {0, 2, 1, 3}) : t;
}

Tensor repeat_kv_heads(const Tensor& t, int64_t Hq) {
  const int64_t B = t.size(0), Hkv = t.size(1), T = t.size(2), w = t.size(3), group = Hq / Hkv;
  return group == 1 ? t : expand(t.reshape({B, Hkv, 1, T, w}), {B, Hkv, group, T, w}).reshape({B, Hq, T, w});
}

}  // namespace detail

const AttentionFunctionTraits& attention_function_traits(AttentionFunction function) {
  return entry_of(function).traits;
}

int64_t attention_forward_flops(AttentionFunction function, FeatureMap map, int64_t features, int64_t B, int64_t H,
                                int64_t T, int64_t d) {
  return entry_of(function).forward_flops(map, features, B, H, T, d);
}

AttentionFunction function_of(const AttentionSpec& spec) {
  static_assert(std::size(kAttentionFunctions) == std::size(EnumNames<AttentionFunction>::values),
                "kAttentionFunctions has a row for every AttentionFunction");
  // The attention functions of q, k, v, one per alternative, come before the mixers with their own op.
  static_assert(std::variant_size_v<AttentionParams> == static_cast<size_t>(kFirstOwnMixer));
  static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(AttentionFunction::Softmax), AttentionParams>,
                               SoftmaxAttention> &&
                std::is_same_v<std::variant_alternative_t<static_cast<size_t>(AttentionFunction::Linear), AttentionParams>,
                               LinearAttention> &&
                std::is_same_v<std::variant_alternative_t<static_cast<size_t>(AttentionFunction::Ssd), AttentionParams>,
                               SsdAttention>,
                "AttentionParams lists the functions in AttentionFunction's order");
  return static_cast<AttentionFunction>(spec.function.index());
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                 AttentionInternals* internals) {
  check_inputs(q, k, v, spec);
  if (spec.cache) check_decode(q, k, v, spec);
  if (internals) *internals = {};
  Tensor Z;
  if (spec.position == PositionEncoding::Rope) {
    // Every function sees rotated q and k; decoding, the new positions are the cache's next ones,
    // and the cache keeps their rotated keys. Softmax's keys may be the first kv_length rows, and
    // its queries offset; the other functions' queries sit at the keys' positions.
    const SoftmaxAttention* softmax = std::get_if<SoftmaxAttention>(&spec.function);
    const int64_t Tq = detail::positions_of(q, spec.layout), kv_rows = detail::positions_of(k, spec.layout);
    const int64_t Tk = softmax ? softmax->kv_length.value_or(kv_rows) : kv_rows;
    const int64_t next = spec.cache ? spec.cache->length + spec.cache->rolled : 0;
    const int64_t q_offset = softmax ? softmax->q_offset.value_or(Tk - Tq) : Tk - Tq;
    const int64_t q_first = spec.cache ? next : q_offset, k_first = spec.cache ? next : 0;
    AttentionSpec rotated = spec;
    rotated.position = PositionEncoding::None;
    if (spec.context)  // each half of the rows at its own chunk's positions
      Z = attend(detail::rope_at_context_positions(q, spec), detail::rope_at_context_positions(k, spec), v, rotated,
                 internals);
    else
      Z = attend(rope(q, spec.layout, q_first, spec.rope_base), rope(k, spec.layout, k_first, spec.rope_base), v,
                 rotated, internals);
  } else {
    Z = attend(q, k, v, spec, internals);
  }
  if (spec.cache) spec.cache->length += k.size(1);
  return Z;
}

// x' = R(θ) x per pair, θ = p·f_i. R is orthogonal, so the backward is dx = R(θ)ᵀ dx' = R(−θ) dx'.
Tensor rope(const Tensor& x, AttentionLayout layout, int64_t first_position, double base) {
  detail::check_compatible("rope", {&x});
  AG_CHECK(x.dim() == 4 && x.size(3) % 2 == 0,
           "rope: x " << describe(x) << " is not [B, H, T, d] or [B, T, H, d] with d even (pairs of dims rotate)");
  AG_CHECK(base > 0 && std::isfinite(base), "rope: rope_base " << base << " is not a positive number");
  const RotaryShape shape{.B = x.size(0), .H = detail::heads_of(x, layout), .T = detail::positions_of(x, layout),
                          .d = x.size(3), .at = detail::head_strides(x, layout), .first_position = first_position,
                          .base = base, .direction = 1.0};
  Tensor y = detail::empty_like(x);
  kernel::rotary_embedding(x, shape, y);
  return record("rope", {x}, y, [shape](const Tensor& dY) -> Gradients {
    RotaryShape inverse = shape;
    inverse.direction = -1.0;
    Tensor dX = detail::empty_like(dY);
    kernel::rotary_embedding(dY, inverse, dX);
    return {dX};
  });
}

// Softmax attention whose queries see only their window and the global keys, whose distances to
// them rolling keeps (ALiBi's to a global key it would not).
bool attention_cache_rolls(const AttentionSpec& spec) {
  const SoftmaxAttention* softmax = std::get_if<SoftmaxAttention>(&spec.function);
  return softmax && softmax->pattern.limited() && softmax->pattern.random_blocks == 0 &&
         !(spec.position == PositionEncoding::Alibi && softmax->pattern.global > 0);
}

int64_t rolling_cache_capacity(const SparsePattern& pattern, int64_t T_new) {
  return pattern.global + pattern.window * pattern.dilation - 1 + T_new;
}

int64_t LayerKVCache::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&k, &v, &state, &conv})
    if (t->defined()) total += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
  return total;
}

Tensor attention_mask(const AttentionMask& mask, int64_t Tq, int64_t Tk, DType dtype, Device device, int64_t heads,
                      int64_t batches) {
  std::vector<double> m;
  m.reserve(batches * heads * Tq * Tk);
  for (int64_t b = 0; b < batches; ++b) {
    const AttentionMask entry = mask.at_batch(b);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const AttentionMask::Row row = entry.row(h, i);
        for (int64_t j = 0; j < Tk; ++j)
          m.push_back(row.visible(j) ? entry.bias(entry.alibi_slope(h), i, j) : -std::numeric_limits<double>::infinity());
      }
  }
  return Tensor::from_vector(m, {batches, heads, Tq, Tk}, dtype).to(device);
}

namespace {

// Every query's position p = i + q_offset indexes a key's entry of `what`.
void check_positions_fit(const char* what, int64_t Tq, int64_t Tk, int64_t q_offset, const std::string& where) {
  AG_CHECK(q_offset >= 0 && q_offset + Tq <= Tk, where << ": " << what << " are given per key position, and queries at "
                                                        << q_offset << ".." << q_offset + Tq - 1 << " are not all among the "
                                                        << Tk << " keys");
}
std::vector<int64_t> int_values(const Tensor& t) {
  std::vector<int64_t> out;
  for (const double x : t.to_vector()) out.push_back(static_cast<int64_t>(x));
  return out;
}

// MaskMods::documents checked and read: [Tk] or [B·Tk] ids (empty: none).
std::vector<int64_t> document_ids(const MaskMods& masks, int64_t B, int64_t Tq, int64_t Tk, int64_t q_offset,
                                  const std::string& where) {
  if (!masks.documents.defined()) return {};
  const Tensor& d = masks.documents;
  AG_CHECK(d.dtype() == DType::Int64 && ((d.dim() == 1 && d.size(0) == Tk) || (d.dim() == 2 && d.size(0) == B && d.size(1) == Tk)),
           where << ": document ids " << describe(d) << " are not int64 [Tk] or [B, Tk] = [" << Tk << "] or [" << B << ", "
                 << Tk << "] (one id per key position)");
  check_positions_fit("document ids", Tq, Tk, q_offset, where);
  return int_values(d);
}

}  // namespace

std::vector<int64_t> document_starts(const MaskMods& masks, int64_t B, int64_t Tq, int64_t Tk, int64_t q_offset,
                                     const std::string& where) {
  const std::vector<int64_t> ids = document_ids(masks, B, Tq, Tk, q_offset, where);
  std::vector<int64_t> starts(ids.size());
  for (size_t row = 0; row < ids.size(); row += static_cast<size_t>(Tk)) {
    std::unordered_set<int64_t> ended;  // documents whose run is over: seen again, they are not runs
    for (int64_t t = 0; t < Tk; ++t) {
      const int64_t id = ids[row + t];
      if (t > 0 && id == ids[row + t - 1]) {
        starts[row + t] = starts[row + t - 1];
        continue;
      }
      if (t > 0) ended.insert(ids[row + t - 1]);
      if (ended.count(id)) return {};
      starts[row + t] = t;
    }
  }
  return starts;
}

MaskBytes evaluate_mask(const MaskMods& masks, int64_t B, int64_t Hq, int64_t Tq, int64_t Tk, int64_t q_offset,
                        const std::string& where) {
  const auto positions_fit = [&](const char* what) { check_positions_fit(what, Tq, Tk, q_offset, where); };
  AG_CHECK(!masks.edges.defined(), where << ": an edge list is not evaluated as bytes (edge_adjacency gives its dense form)");
  MaskBytes out;
  std::vector<int64_t> parents;
  const std::vector<int64_t> documents = document_ids(masks, B, Tq, Tk, q_offset, where);
  if (masks.documents.defined() && masks.documents.dim() == 2) out.batches = B;
  if (masks.prefix)
    AG_CHECK(*masks.prefix >= 0 && *masks.prefix <= Tk,
             where << ": prefix-LM prefix " << *masks.prefix << " is outside [0, " << Tk << "] (the keys)");
  if (masks.parents.defined()) {
    const Tensor& t = masks.parents;
    AG_CHECK(t.dtype() == DType::Int64 && t.dim() == 1 && t.size(0) == Tk,
             where << ": token tree parents " << describe(t) << " are not int64 [Tk] = [" << Tk << "] (one per key position)");
    AG_CHECK(masks.tree_prefix >= 0 && masks.tree_prefix <= Tk,
             where << ": token tree prefix " << masks.tree_prefix << " is outside [0, " << Tk << "]");
    positions_fit("token tree parents");
    parents = int_values(t);
    for (int64_t n = 0; n < Tk; ++n)
      AG_CHECK(parents[n] >= -1 && parents[n] < n,
               where << ": token tree node " << n << " has parent " << parents[n]
                     << ", not earlier than the node (a parent must be < its node, or -1 for a root)");
  }
  std::vector<double> adjacency;
  if (masks.adjacency.defined()) {
    const Tensor& a = masks.adjacency;
    AG_CHECK((a.dim() == 2 || (a.dim() == 3 && a.size(0) == B)) && a.size(-2) == Tq && a.size(-1) == Tk,
             where << ": adjacency " << describe(a) << " is not [Tq, Tk] = [" << Tq << ", " << Tk << "] or [B, Tq, Tk] = [" << B
                   << ", " << Tq << ", " << Tk << "]");
    adjacency = a.to_vector();
    if (a.dim() == 3) out.batches = B;  // a graph per batch entry
  }
  if (masks.custom) out.batches = B, out.heads = Hq;
  out.bytes.assign(out.batches * out.heads * Tq * Tk, 1);
  std::vector<uint8_t> tree(Tk);
  for (int64_t b = 0; b < out.batches; ++b)
    for (int64_t h = 0; h < out.heads; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        uint8_t* row = out.bytes.data() + ((b * out.heads + h) * Tq + i) * Tk;
        const int64_t p = i + q_offset;
        if (masks.prefix)  // the prefix both ways; after it, causal
          for (int64_t j = std::max(*masks.prefix, p + 1); j < Tk; ++j) row[j] = 0;
        if (!documents.empty()) {  // its own document, causally
          const int64_t* doc = documents.data() + (masks.documents.dim() == 2 ? b * Tk : 0);
          for (int64_t j = 0; j < Tk; ++j) row[j] &= static_cast<uint8_t>(j <= p && doc[j] == doc[p]);
        }
        if (!parents.empty()) {  // the shared prefix (causal in itself), the node and its ancestors
          std::fill(tree.begin(), tree.end(), uint8_t{0});
          for (int64_t j = 0; j < std::min(masks.tree_prefix, p + 1); ++j) tree[j] = 1;
          for (int64_t n = p; n >= 0; n = parents[n]) tree[n] = 1;
          for (int64_t j = 0; j < Tk; ++j) row[j] &= tree[j];
        }
        if (!adjacency.empty()) {
          const double* graph = adjacency.data() + (masks.adjacency.dim() == 3 ? b * Tq * Tk : 0);
          for (int64_t j = 0; j < Tk; ++j) row[j] &= static_cast<uint8_t>(graph[i * Tk + j] != 0);
        }
        if (masks.custom)
          for (int64_t j = 0; j < Tk; ++j) row[j] &= static_cast<uint8_t>(masks.custom(b, h, p, j));
      }
  return out;
}

Tensor attention_mask(const AttentionMask& mask, int64_t Tq, int64_t Tk, DType dtype, Device device, int64_t heads) {
  std::vector<double> m(heads * Tq * Tk);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < Tq; ++i) {
      const AttentionMask::Row row = mask.row(h, i);
      for (int64_t j = 0; j < Tk; ++j)
        m[(h * Tq + i) * Tk + j] =
            row.visible(j) ? mask.bias(mask.alibi_slope(h), i, j) : -std::numeric_limits<double>::infinity();
    }
  return Tensor::from_vector(m, heads == 1 ? Shape{Tq, Tk} : Shape{heads, Tq, Tk}, dtype).to(device);
}

void check_sparse_pattern(const SparsePattern& pattern, const std::string& where) {
  AG_CHECK(pattern.window >= 0 && pattern.dilation >= 1 && pattern.global >= 0 && pattern.random_blocks >= 0 &&
               pattern.random_blocks <= kMaxRandomBlocks,
           where << ": sparse pattern window " << pattern.window << ", dilation " << pattern.dilation << ", global "
                 << pattern.global << ", random blocks " << pattern.random_blocks
                 << " (window, global, random >= 0; dilation >= 1; random <= " << kMaxRandomBlocks << ")");
  AG_CHECK(pattern.limited() || (pattern.dilation == 1 && pattern.global == 0 && pattern.random_blocks == 0),
           where << ": dilation, global tokens and random blocks restrict or extend a window; without one "
                    "(window 0) every earlier key is visible already");
}

Tensor causal_mask(int64_t T, DType dtype, Device device) {
  return attention_mask({.causal = true, .q_offset = 0, .pattern = {}}, T, T, dtype, device);
}

}  // namespace ag
