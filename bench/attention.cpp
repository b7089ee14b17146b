// bench_attention: the attention op (core/ops.h) on the CPU in float32, every
// implementation, forward and forward+backward: wall time, GFLOP/s and peak
// extra memory, for B·H = 8 (B = 1, H = 8), d in {32, 64}, T in {64, 256, 1024,
// 4096, 16384}, each mask of --masks: none, causal, or a sparse pattern written
// w<W>[d<δ>][g<G>][r<R>] (window W, dilation δ, G global keys, R random blocks;
// e.g. w64, w64g16r2). The machine's sgemm rate, measured at start
// with the same threads, is printed beside them. Output: a Markdown table
// (bench/attention_torch.py prints PyTorch's rows in the same format).
//
//   ./build/bench_attention --threads 2
//
// GFLOP/s counts the products' multiply-adds as docs/backprop.md does: forward
// 4·Tq·Tk·d per head (masked: the visible pairs only), backward 2.5× that; the
// density column is the visible pairs over T². linear-elu1 and linear-favor time
// linear attention (FAVOR+ with m = 64 features, masks none or causal) beside
// them: O(T·r·d), so its GFLOP/s by that count is not shown; ssd times state-space
// attention (Mamba-2's SSD, mask causal, chunks of 64; Δ ∈ [1e-3, 0.1], a_log = log 4,
// D = 1): O(T·(64 + d)·d), shown the same way.
// Each case runs in a process of its own (this program with --case); a case
// whose estimated memory exceeds --memory-limit-gb is listed as skipped.
// A mask doc<L> packs documents of L positions each (the last one shorter) into the
// sequence: the document mask (MaskMods::documents, causal within each document); its
// case also times the mask's construction (its document starts, then the flash block map, built
// anew each time: what the first call with a new layout pays), printed after the table.
// --positions none,rope,alibi times each case with each position encoding
// (AttentionSpec::position; alibi: softmax only): what rope's rotation of q and k
// and ALiBi's bias in the scores cost beside the same case without them.
// --mods none,cap,relative,sinks,indexed,cap+relative+sinks times each softmax case with each
// set of score modifiers (SoftmaxAttention::mods, '+' joins several): cap, tanh soft-capping at
// 50 (Gemma 2's); relative, a T5 relative-position bias table [H, 32] (max distance 128,
// bidirectional); sinks, a sink logit per head [H]; indexed, a table [H, 16] read through the
// index (p − j) mod 16 [T, T]. The tables and sinks are random leaves that require grad, so the
// backward computes their gradients too, as training does. The table then has a mods column
// (not with --mods none, the default: the tables above stay as they were).
// --device cuda runs every case on the GPU (float32 still): each timed call waits
// for the device (cuda::synchronize), and the memory column is what the device's
// caching allocator holds (in use + cached) after the forward and after the
// backward, above what it held before (it keeps freed blocks, so that is the peak).
// --precision bf16 (or tf32) runs the cases under that --precision (optim::PrecisionScope,
// CUDA only): the tensors stay float32, the GEMMs and flash attention round their inputs
// (bf16 flash: the tensor-core kernels of cuda/flash_mma.cu, the copies to bf16 timed
// with them). GFLOP/s as above: causal counts the visible pairs, T(T + 1)/2 per head,
// FlashAttention's papers' 4·B·H·T²·d·0.5 forward and 2.5× that backward.
// bench/flash_torch.py prints PyTorch SDPA-flash's rows for the same cases in bf16.
//
//   ./build-gpu/bench_attention --device cuda --impls ssd,linear-elu1,flash --masks causal --T 512,16384 --d 64,128
//   ./build-gpu/bench_attention --device cuda --precision bf16 --impls flash --masks causal --T 4096 --d 64,128
#include <cblas.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/measure.h"
#include "core/attention_blocks.h"
#include "core/ops.h"
#include "core/threads.h"
#include "cuda/context.h"
#include "examples/common/command_line.h"
#include "optim/train_step.h"

using namespace ag;

namespace {

constexpr int64_t kBatch = 1, kHeads = 8;

struct Case {
  std::string impl;
  int64_t T, d;
  std::string mask;  // none, causal, doc<L>, or w<W>[d<δ>][g<G>][r<R>]
  std::string position = "none";  // none, rope or alibi (AttentionSpec::position)
  std::string mods = "none";      // none, or score modifiers joined by '+': cap, relative, sinks, indexed
};

// Which score modifiers a --mods entry names.
struct ModSet {
  bool cap = false, relative = false, sinks = false, indexed = false;
};

ModSet mods_of(const std::string& entry) {
  ModSet set;
  if (entry == "none") return set;
  std::istringstream in(entry);
  for (std::string name; std::getline(in, name, '+');) {
    if (name == "cap") set.cap = true;
    else if (name == "relative") set.relative = true;
    else if (name == "sinks") set.sinks = true;
    else if (name == "indexed") set.indexed = true;
    else throw Error("--mods " + entry + ": expected none, or cap, relative, sinks, indexed joined by '+'");
  }
  return set;
}

// The score modifiers of a case, their learnable tensors made by leaf (random, requiring grad):
// S' = cap·tanh((S + relative[h, bucket(j − p)] + indexed[h, (p − j) mod 16]) / cap), sinks in
// each row's denominator. Returns the leaves, whose gradients each timed backward fills.
std::vector<Tensor> add_mods(ScoreMods& mods, const Case& c, Generator& gen, Device device,
                             const std::function<Tensor(const Tensor&)>& leaf) {
  const ModSet set = mods_of(c.mods);
  std::vector<Tensor> leaves;
  if (set.cap) mods.soft_cap = 50.0;
  if (set.relative) {  // [H, 32]
    mods.relative = {.table = leaf(Tensor::randn({kHeads, 32}, DType::Float32, &gen)), .bidirectional = true,
                     .max_distance = 128};
    leaves.push_back(mods.relative.table);
  }
  if (set.sinks) {  // [H]
    mods.sinks = leaf(Tensor::randn({kHeads}, DType::Float32, &gen));
    leaves.push_back(mods.sinks);
  }
  if (set.indexed) {  // table [H, 16], index [T, T]: query p, key j read entry (p − j) mod 16
    constexpr int64_t n = 16;
    std::vector<int64_t> index(c.T * c.T);
    for (int64_t p = 0; p < c.T; ++p)
      for (int64_t j = 0; j < c.T; ++j) index[p * c.T + j] = ((p - j) % n + n) % n;
    mods.indexed = {.table = leaf(Tensor::randn({kHeads, n}, DType::Float32, &gen)),
                    .index = Tensor::from_indices(index, {c.T, c.T}).to(device)};
    leaves.push_back(mods.indexed.table);
  }
  return leaves;
}

// The softmax attention spec of a --masks entry.
AttentionSpec spec_of(const Case& c) {
  AttentionSpec spec{.causal = c.mask != "none"};  // the implementation is set where it runs
  spec.position = enum_from_name<PositionEncoding>(c.position, "--positions");
  if (c.mask == "none" || c.mask == "causal") return spec;
  if (c.mask.starts_with("doc")) {  // documents of L positions: id t / L
    const int64_t L = std::stoll(c.mask.substr(3));
    AG_CHECK(L > 0, "--masks " << c.mask << ": a document length must be positive");
    std::vector<int64_t> ids(c.T);
    for (int64_t t = 0; t < c.T; ++t) ids[t] = t / L;
    std::get<SoftmaxAttention>(spec.function).masks.documents = Tensor::from_indices(ids, {c.T});
    return spec;
  }
  SparsePattern& pattern = std::get<SoftmaxAttention>(spec.function).pattern;
  std::istringstream in(c.mask);
  const std::string expected = "--masks " + c.mask + ": expected none, causal or w<W>[d<dilation>][g<G>][r<R>]";
  for (char part; in >> part;) {
    int64_t value;
    AG_CHECK(in >> value, expected);
    if (part == 'w') pattern.window = value;
    else if (part == 'd') pattern.dilation = value;
    else if (part == 'g') pattern.global = value;
    else if (part == 'r') pattern.random_blocks = value;
    else throw Error(expected);
  }
  return spec;
}

// The (query, key) pairs the mask shows, summed over the heads (random blocks differ by head).
double visible_pairs(const Case& c) {
  if (c.mask.starts_with("doc")) {  // L(L + 1)/2 per whole document, and the last one's
    const int64_t L = std::stoll(c.mask.substr(3)), last = c.T % L;
    return kHeads * (static_cast<double>(c.T / L) * L * (L + 1) / 2 + static_cast<double>(last) * (last + 1) / 2);
  }
  const AttentionSpec spec = spec_of(c);
  const AttentionMask mask{.causal = spec.causal, .q_offset = 0, .pattern = std::get<SoftmaxAttention>(spec.function).pattern};
  double pairs = 0;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t i = 0; i < c.T; ++i) pairs += static_cast<double>(mask.row(h, i).count(0, c.T));
  return pairs;
}

// Multiply-adds ×2 of one forward: 4·d per visible (query, key) pair and head.
double forward_flops(const Case& c) { return 4.0 * kBatch * c.d * visible_pairs(c); }

double estimated_gb(const Case& c) {
  return bench::attention_matrices(c.impl) * kBatch * kHeads * static_cast<double>(c.T) * c.T * 4 / 1e9;
}

// One case, in this process: one forward+backward for the memory (peak after
// the forward and after the backward), then the timed repeats.
// The functions whose cost is not the score count (their GFLOP/s column is left empty).
bool is_linear(const Case& c) { return c.impl.starts_with("linear-") || c.impl == "ssd"; }

// What the device's allocator holds, in MB (the host's peak is read from the process instead).
double device_mb() {
  const MemoryStats stats = cuda::memory_stats();
  return static_cast<double>(stats.in_use_bytes + stats.cached_bytes) / (1024.0 * 1024.0);
}

void run_case(const Case& c, bench::Clock clock, double budget_s, Device device) {
  Generator gen(1);
  const Shape shape = {kBatch, kHeads, c.T, c.d};
  const auto leaf = [&](const Tensor& t) { return t.to(device).requires_grad_(); };
  Tensor q = leaf(Tensor::randn(shape, DType::Float32, &gen));
  Tensor k = leaf(Tensor::randn(shape, DType::Float32, &gen));
  Tensor v = leaf(Tensor::randn(shape, DType::Float32, &gen));
  const Tensor dZ = Tensor::randn(shape, DType::Float32, &gen).to(device);
  std::function<Tensor()> forward;
  std::vector<Tensor> mods_leaves;  // the score modifiers' tables and sinks (--mods)
  if (c.mods != "none" && (c.impl == "ssd" || is_linear(c)))
    throw Error("--mods " + c.mods + ": score modifiers are softmax attention's (composed, dense, flash)");
  if (c.impl == "ssd") {
    if (c.mask != "causal") throw Error("--masks " + c.mask + ": ssd attention is causal");
    const AttentionSpec spec{
        .function = SsdAttention{.dt = leaf(Tensor::uniform({kBatch, kHeads, c.T}, 1e-3, 0.1, DType::Float32, &gen)),
                                 .a_log = leaf(Tensor::full({kHeads}, std::log(4.0))),
                                 .d_skip = leaf(Tensor::ones({kHeads}))},
        .causal = true, .position = enum_from_name<PositionEncoding>(c.position, "--positions")};
    forward = [&q, &k, &v, spec] { return attention(q, k, v, spec); };
  } else if (is_linear(c)) {
    const FeatureMap map = enum_from_name<FeatureMap>(c.impl.substr(7), "--impls");
    if (c.mask != "none" && c.mask != "causal") throw Error("--masks " + c.mask + ": linear attention takes none or causal");
    const AttentionSpec spec{
        .function = LinearAttention{.feature_map = map,
                                    .omega = map == FeatureMap::Favor
                                                 ? favor_projection(64, c.d, 0).to(DType::Float32).to(device)
                                                 : Tensor()},
        .causal = c.mask == "causal", .position = enum_from_name<PositionEncoding>(c.position, "--positions")};
    forward = [&q, &k, &v, spec] { return attention(q, k, v, spec); };
  } else {
    AttentionSpec spec = spec_of(c);
    SoftmaxAttention& softmax = std::get<SoftmaxAttention>(spec.function);
    softmax.impl = enum_from_name<AttentionImpl>(c.impl, "--impls");
    mods_leaves = add_mods(softmax.mods, c, gen, device, leaf);
    forward = [&q, &k, &v, spec] { return attention(q, k, v, spec); };
  }
  const bool gpu = device == Device::CUDA;
  const auto wait = [gpu] {  // a GPU call returns once its kernels are queued
    if (gpu) cuda::synchronize();
  };
  const auto forward_backward = [&] {
    forward().backward(dZ);
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    for (Tensor& t : mods_leaves) t.zero_grad();
    wait();
  };
  double forward_mb, total_mb;
  {
    bench::PeakMemory peak;
    wait();
    const double before_mb = gpu ? device_mb() : 0;
    const Tensor z = forward();
    wait();
    forward_mb = gpu ? device_mb() - before_mb : peak.extra_mb();
    z.backward(dZ);
    wait();
    total_mb = gpu ? device_mb() - before_mb : peak.extra_mb();
  }
  for (Tensor* t : {&q, &k, &v}) t->zero_grad();
  for (Tensor& t : mods_leaves) t.zero_grad();
  const double budget_ms = budget_s * 1000;
  const double forward_ms = bench::median_ms(
      [&] {
        forward();
        wait();
      },
      clock, 1, 10, budget_ms);
  const double total_ms = bench::median_ms(forward_backward, clock, 1, 10, budget_ms);
  // A document mask's construction, as a new layout's first call pays it: its compact form
  // (document_starts: each position's document start, O(T)), then the block map of the CPU's
  // flash tiles (64 queries × 128 keys), classified row by row from those intervals.
  double bytes_ms = 0, map_ms = 0;
  if (c.mask.starts_with("doc")) {
    const AttentionSpec spec = spec_of(c);
    const MaskMods& masks = std::get<SoftmaxAttention>(spec.function).masks;
    std::vector<int64_t> starts;
    bytes_ms = bench::median_ms([&] { starts = document_starts(masks, kBatch, c.T, c.T, 0, "bench"); }, clock, 1, 10,
                                budget_ms);
    AttentionShape shape{.B = kBatch, .Hq = kHeads, .Hkv = kHeads, .Tq = c.T, .Tk = c.T, .d = c.d, .scale = 1.0,
                         .mask = {.causal = true, .q_offset = 0, .pattern = {}}, .q = {}, .kv = {}};
    shape.mask.segment_start = starts.data();
    map_ms = bench::median_ms([&] { AttentionBlockMap map(shape, 64, 128); }, clock, 1, 10, budget_ms);
  }
  std::printf("%.3f %.3f %.1f %.1f %.3f %.3f\n", forward_ms, total_ms, forward_mb, total_mb, bytes_ms, map_ms);
}

// 2·n³ / time of an n×n×n sgemm, median of 5: the machine's product rate.
double sgemm_gflops(int n, bench::Clock clock) {
  std::vector<float> a(n * n, 1.0f), b(n * n, 1.0f), c(n * n);
  const double ms = bench::median_ms(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                    n);
      },
      clock, 5, 5, 0);
  return 2.0 * n * n * n / ms / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program program{"Time and memory of the attention op, every implementation (see the top of bench/attention.cpp)"};
  cli::Command& command = program.command();
  int threads = 2;
  std::string impls = "composed,dense,flash", lengths = "64,256,1024,4096,16384", widths = "32,64";
  std::string masks = "none,causal", positions = "none", mods = "none";
  double memory_limit_gb = 4, budget_s = 2;
  std::string clock = "wall", device_option = "cpu", precision_option = "fp32";
  std::vector<std::string> one_case;
  command.option("--threads", threads, "CPU threads (OpenMP and OpenBLAS)");
  command.option("--impls", impls, "implementations, comma-separated: composed, dense, flash, linear-elu1, linear-favor, ssd");
  command.option("--T", lengths, "sequence lengths, comma-separated");
  command.option("--d", widths, "head widths, comma-separated");
  command.option("--masks", masks, "masks, comma-separated: none, causal, doc<L>, w<W>[d<dilation>][g<G>][r<R>]");
  command.option("--positions", positions, "position encodings, comma-separated: none, rope, alibi");
  command.option("--mods", mods,
                 "score modifier sets, comma-separated: none, cap, relative, sinks, indexed, or several joined by '+' "
                 "(cap+relative+sinks); other than none, the table gets a mods column");
  command.option("--memory-limit-gb", memory_limit_gb, "skip cases estimated to need more");
  command.option("--budget-s", budget_s, "seconds of repeats per timing (at least one run, at most 10)");
  command.option("--clock", clock, "wall, or cpu: the process's CPU time (for one thread on a busy machine)")
      .one_of({"wall", "cpu"});
  command.option("--device", device_option, "where every case runs: cpu, or cuda (see the top of this file)")
      .one_of({"cpu", "cuda"});
  command.option("--precision", precision_option, "fp32, tf32 or bf16: the cases' --precision (tf32 and bf16: CUDA only)")
      .one_of({"fp32", "tf32", "bf16"});
  command.option("--case", one_case, "internal: run one case (impl T d mask position mods) and print its numbers")
      .expected(6);
  if (const int code = program.parse_plain(argc, argv); code >= 0) return code;
  const bench::Clock timing = clock == "cpu" ? bench::Clock::Cpu : bench::Clock::Wall;
  set_num_threads(threads);
  bench::return_freed_memory_to_the_system();
  const Device device = enum_from_name<Device>(device_option, "--device");
  const Precision precision = enum_from_name<Precision>(precision_option, "--precision");
  if (precision != Precision::FP32 && device != Device::CUDA) {
    std::fprintf(stderr, "--precision %s runs on CUDA (--device cuda)\n", precision_option.c_str());
    return 1;
  }
  if (device == Device::CUDA && !cuda::available()) {
    std::fprintf(stderr, "--device cuda: %s\n", cuda::describe_device().c_str());
    return 1;
  }
  const optim::PrecisionScope precision_scope(precision);  // the GEMMs' and flash's arithmetic, for every case

  if (!one_case.empty()) {
    run_case({one_case[0], std::stoll(one_case[1]), std::stoll(one_case[2]), one_case[3], one_case[4], one_case[5]},
             timing, budget_s, device);
    return 0;
  }
  // The mods column only when --mods names modifiers: the tables without it (docs/performance.md,
  // scripts/gpu_check.sh's column numbers) stay as they were.
  const bool mods_column = mods != "none";
  try {
    for (const std::string& entry : cli::split_list(mods)) mods_of(entry);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("%s\nsgemm 2048³ on %d threads: %.0f GFLOP/s (%s time)\n", cpu_runtime_summary().c_str(), threads,
              sgemm_gflops(2048, timing), clock.c_str());
  std::printf("device: %s, precision %s\n\n", device == Device::CPU ? "cpu" : cuda::describe_device().c_str(),
              precision_option.c_str());
  std::printf("| d | T | mask | density | impl | position |%s fwd ms | fwd GFLOP/s | fwd+bwd ms | fwd+bwd GFLOP/s | peak extra MB fwd / fwd+bwd |\n",
              mods_column ? " mods |" : "");
  std::printf("|---|---|---|---:|---|---|%s---:|---:|---:|---:|---:|\n", mods_column ? "---|" : "");
  std::vector<std::string> constructions;  // doc<L> masks' construction, printed after the table
  for (const std::string& d : cli::split_list(widths))
    for (const std::string& T : cli::split_list(lengths))
      for (const std::string& mask : cli::split_list(masks))
        for (const std::string& impl : cli::split_list(impls))
          for (const std::string& position : cli::split_list(positions))
            for (const std::string& mod : cli::split_list(mods)) {
              const Case c{impl, std::stoll(T), std::stoll(d), mask, position, mod};
              if (mod != "none" && is_linear(c)) continue;  // score modifiers are softmax attention's
              const double flops = forward_flops(c), density = flops / (4.0 * kBatch * kHeads * c.d * c.T * c.T);
              std::printf("| %s | %s | %s | %.4f | %s | %s | ", d.c_str(), T.c_str(), mask.c_str(), density, impl.c_str(),
                          position.c_str());
              if (mods_column) std::printf("%s | ", mod.c_str());
              if (estimated_gb(c) > memory_limit_gb) {
                std::printf("skipped: needs about %.0f GB | | | | |\n", estimated_gb(c));
                std::fflush(stdout);
                continue;
              }
              std::ostringstream command;
              command << "/proc/" << getpid() << "/exe --threads " << threads << " --budget-s " << budget_s << " --clock "
                      << clock << " --device " << device_option << " --precision " << precision_option << " --case "
                      << impl << ' ' << T << ' ' << d << ' ' << mask << ' ' << position << ' ' << mod;
              double forward_ms, total_ms, forward_mb, total_mb, bytes_ms, map_ms;
              if (std::sscanf(bench::run_and_capture(command.str()).c_str(), "%lf %lf %lf %lf %lf %lf", &forward_ms,
                              &total_ms, &forward_mb, &total_mb, &bytes_ms, &map_ms) != 6) {
                std::printf("failed | | | | |\n");
                continue;
              }
              if (is_linear(c)) {
                std::printf("%.2f | — | %.2f | — | %.1f / %.1f |\n", forward_ms, total_ms, forward_mb, total_mb);
                std::fflush(stdout);
                continue;
              }
              std::printf("%.2f | %.1f | %.2f | %.1f | %.1f / %.1f |\n", forward_ms, flops / forward_ms / 1e6, total_ms,
                          3.5 * flops / total_ms / 1e6, forward_mb, total_mb);
              std::fflush(stdout);
              if (mask.starts_with("doc")) {
                std::ostringstream line;
                line << "d " << d << ", T " << T << ", " << mask << ", " << impl << ": mask construction " << bytes_ms + map_ms
                      << " ms (document starts " << bytes_ms << " ms, block map " << map_ms << " ms) = "
                     << 100 * (bytes_ms + map_ms) / forward_ms << " % of one forward";
                constructions.push_back(line.str());
              }
            }
  if (!constructions.empty()) std::printf("\n");
  for (const std::string& line : constructions) std::printf("%s\n", line.c_str());
  return 0;
}
