// Causal self-attention with every intermediate printed, forward and backward:
// the study aid for docs/backprop.md. Each backward step is printed under the
// section of docs/backprop.md whose formula it evaluates.
//
//   Q = X W_Q + b_Q,  K = X W_K + b_K,  V = X W_V + b_V      X, Q, K, V [n, d_model]
//   per head h:  S_h = Q_h K_hᵀ / √d_k,  A_h = softmax(S_h + M),  Z_h = A_h V_h
//   O = Concat(Z_1, ..., Z_H) W_O + b_O,  Y = X + O,  L = Σ Y ∘ R
//
// Default: n = 4 tokens, d_model = 8, H = 2 heads (d_k = 4), random weights.
// --tiny: n = 2, d_model = d_k = 1, one head, weights picked so that every
// number can be followed with a pencil: the worked example of docs/backprop.md,
// section 20.
//
// The step-by-step values come from core ops on the module's own parameters and
// are checked against nn::MultiHeadSelfAttention; the backward done by hand is
// checked against backward(), and backward() against central differences.
// Everything is float64.
//
//   ./build/attention_walkthrough [--seed N] [--tiny] [--digits N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "examples/common/command_line.h"
#include "nn/attention.h"

using namespace ag;

namespace {

struct Sizes {
  int64_t n, d_model, H;
  int64_t d_h() const { return d_model / H; }
};

int digits = 4;  // decimals printed

std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

int cell_width() { return digits + 5; }  // "-12." and a space before

// One aligned cell. Exact zeros print as "0" (not "0.0000") so the masked upper
// triangle of A is visibly exact; −inf prints as "-inf".
std::string cell(double v) {
  char buf[48];
  if (v == 0.0)
    std::snprintf(buf, sizeof buf, "%*s", cell_width(), "0");
  else
    std::snprintf(buf, sizeof buf, "%*.*f", cell_width(), digits, v);
  return buf;
}

// Row r of a 1-D (one row) or 2-D tensor, as aligned cells.
std::string row(const Tensor& t, int64_t r) {
  const std::vector<double> v = t.to_vector();
  const int64_t cols = t.size(-1);
  std::string s;
  for (int64_t c = 0; c < cols; ++c) s += cell(v[r * cols + c]);
  return s;
}

int64_t rows(const Tensor& t) { return t.dim() == 1 ? 1 : t.size(0); }

// "title  [r, c]  why", then the values.
void print_matrix(const std::string& title, const Tensor& t, const std::string& why = "") {
  std::printf("\n%s  %s%s%s\n", title.c_str(), shape_string(t).c_str(), why.empty() ? "" : "  ", why.c_str());
  for (int64_t r = 0; r < rows(t); ++r) std::printf("%s\n", row(t, r).c_str());
}

// Two matrices of one shape side by side, for the gradient check.
void print_pair(const std::string& left, const Tensor& a, const std::string& right, const Tensor& b) {
  const int width = static_cast<int>(cell_width() * a.size(-1));
  std::printf("\n%-*s  |  %s  %s\n", width, left.c_str(), right.c_str(), shape_string(a).c_str());
  for (int64_t r = 0; r < rows(a); ++r) std::printf("%s  |%s\n", row(a, r).c_str(), row(b, r).c_str());
}

// §21 on one query row i, for --tiny: flash's online softmax over key tiles of
// one key each (the visible keys j ≤ i), printing the running max m, sum l and
// accumulator a after each tile, then Z_i = a / l and lse_i = m + ln l, and the
// backward's D_i both ways: rowsum(dZ_i ∘ Z_i), as flash forms it, and
// rowsum(dA_i ∘ A_i), as §20 does. S: [n, n] scaled scores, V: [n, d].
void print_flash_row(const Tensor& S, const Tensor& V, const Tensor& A, const Tensor& dA, const Tensor& dZ, int64_t i) {
  const std::vector<double> s = S.to_vector(), v = V.to_vector(), a_row = A.to_vector(), da = dA.to_vector(),
                            dz = dZ.to_vector();
  const int64_t n = S.size(0), d = V.size(1);
  std::printf("\nflash, query row %lld as %lld key tiles of one key (§21): start (m, l, a) = (-inf, 0, 0)\n",
              static_cast<long long>(i), static_cast<long long>(i + 1));
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  std::vector<double> acc(static_cast<size_t>(d), 0.0);
  for (int64_t j = 0; j <= i; ++j) {  // key tiles after i are hidden: skipped, never computed
    const double score = s[i * n + j], m_new = std::max(m, score), rescale = std::exp(m - m_new), p = std::exp(score - m_new);
    l = l * rescale + p;
    for (int64_t c = 0; c < d; ++c) acc[c] = acc[c] * rescale + p * v[j * d + c];
    m = m_new;
    std::printf("  after key tile %lld: (m, l, a) = (%.6f, %.6f, %.6f)\n", static_cast<long long>(j), m, l, acc[0]);
  }
  double D_flash = 0, D_dense = 0;
  for (int64_t c = 0; c < d; ++c) D_flash += dz[i * d + c] * acc[c] / l;
  for (int64_t j = 0; j < n; ++j) D_dense += da[i * n + j] * a_row[i * n + j];
  std::printf("  Z_%lld = a / l = %.6f   lse_%lld = m + ln l = %.6f\n", static_cast<long long>(i), acc[0] / l,
              static_cast<long long>(i), m + std::log(l));
  std::printf("  D_%lld = rowsum(dZ ∘ Z) = %.6f = rowsum(dA ∘ A) = %.6f (§20)\n", static_cast<long long>(i), D_flash,
              D_dense);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::abs(v));
  return m;
}

Tensor T(const Tensor& t) { return transpose(t, 0, 1); }

// Columns h·d_h .. (h+1)·d_h − 1 of [n, d_model]: head h's slice, as the module splits heads.
Tensor head(const Tensor& t, int64_t h, int64_t d_h) { return slice(t, 1, h * d_h, (h + 1) * d_h); }

// "matches backward(): yes (max |difference| 1.1e-16)"
void print_agreement(const std::string& what, const Tensor& by_hand, const Tensor& autograd) {
  const double diff = max_abs(by_hand - autograd);
  std::printf("%-6s by hand = backward(): %s (max |difference| %.1e)\n", what.c_str(), diff < 1e-12 ? "yes" : "NO",
              diff);
}

}  // namespace

// The walkthrough's options (core/options.h explains the columns).
#define AG_WALKTHROUGH_OPTIONS(X)                                                                            \
  X(Local, uint64_t, seed,   1,     0, kNoLimit, "random weights and inputs of the default case")           \
  X(Local, bool,     tiny,   false, 0, 0,        "2 tokens, d_model = d_k = 1, one head: docs/backprop.md section 20, by hand") \
  X(Local, int64_t,  digits, 4,     1, 15,       "decimals printed (6 with --tiny unless given)")
struct WalkthroughOptions {
  AG_DECLARE_OPTIONS(AG_WALKTHROUGH_OPTIONS)
};

int main(int argc, char** argv) {
  cli::Program program("Prints every step of causal multi-head self-attention, forward and backward, each backward "
                       "step under the docs/backprop.md section it comes from, and checks the gradients against "
                       "backward() and finite differences. By default: 4 tokens, d_model = 8, 2 heads, random weights.",
                       "attention_walkthrough");
  // check_sizes: long on purpose — main reads as the walkthrough's script, top to bottom in the order of
  // docs/backprop.md (the forward, then each backward step under its section); cut into functions, the
  // steps' shared tensors would become long parameter lists and the script would no longer read in order.
  WalkthroughOptions options;
  cli::ProcessOptions process;
  process.threads = 1;
  cli::Command& command = program.command();
  command.bind(options).bind(process);
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  const uint64_t seed = options.seed;
  const bool tiny = options.tiny, digits_given = command.given("digits");
  digits = static_cast<int>(options.digits);
  if (tiny && !digits_given) digits = 6;
  const Sizes size = tiny ? Sizes{2, 1, 1} : Sizes{4, 8, 2};
  const int64_t n = size.n, d_model = size.d_model, H = size.H, d_h = size.d_h();

  // Draw order fixes every number: the module's W and b, then X, then R.
  Generator gen(seed);
  nn::MultiHeadSelfAttention attn({.C = d_model, .H = H, .causal = true}, {.impl = nn::AttentionImpl::Dense}, &gen);
  attn.to(DType::Float64);
  Tensor A_module;  // the module's A [1, H, n, n], from a probe (nn/mixer.h)
  attn.set_probe([&A_module](const nn::MixerRecord& record) { A_module = record.weights; });
  Tensor X = Tensor::randn({n, d_model}, DType::Float64, &gen);
  Tensor R = Tensor::randn({n, d_model}, DType::Float64, &gen);

  // The module's parameters by name ("w_q.weight", "w_q.bias", ...). These tensors
  // share storage with the module, so writing into them changes the module.
  auto param = [&](const std::string& name) {
    for (const NamedTensor& p : attn.named_parameters())
      if (p.name == name) return p.tensor;
    throw Error("attention_walkthrough: no parameter " + name);
  };
  const char* tags[] = {"Q", "K", "V", "O"};
  const char* names[] = {"w_q", "w_k", "w_v", "w_o"};
  Tensor W[4], b[4];
  for (int i = 0; i < 4; ++i) {
    W[i] = param(std::string(names[i]) + ".weight");
    b[i] = param(std::string(names[i]) + ".bias");
  }
  if (tiny) {
    // x = (0, 1): the first token's Q and K are 0, the second's 1 and ln 3, so
    // the second row of A is softmax(0, ln 3) = (1/4, 3/4) exactly. b_V = 1
    // gives the first token a value too: V = 2x + 1 = (1, 3).
    const double w[4] = {1, std::log(3.0), 2, 1}, bias[4] = {0, 0, 1, 0};
    for (int i = 0; i < 4; ++i) {
      W[i].data<double>()[0] = w[i];
      b[i].data<double>()[0] = bias[i];
    }
    X = Tensor::from_vector({0, 1}, {n, d_model}, DType::Float64);
    R = Tensor::from_vector({1, 2}, {n, d_model}, DType::Float64);
  }
  X.requires_grad_();

  std::printf("Causal multi-head self-attention, step by step (%s, float64)\n",
              tiny ? "--tiny: docs/backprop.md section 20" : ("seed " + std::to_string(seed)).c_str());
  std::printf("n = %lld tokens, d_model = %lld, H = %lld head%s, d_k = d_h = d_model / H = %lld\n",
              static_cast<long long>(n), static_cast<long long>(d_model), static_cast<long long>(H),
              H == 1 ? "" : "s", static_cast<long long>(d_h));
  print_matrix("X", X, "the input: one row per token");
  for (int i = 0; i < 4; ++i) {
    print_matrix(std::string("W_") + tags[i], W[i], std::string("attn.") + names[i] + ".weight, stored [in, out]");
    print_matrix(std::string("b_") + tags[i], b[i],
                 std::string("attn.") + names[i] + ".bias: the module's Linear layers have biases");
  }

  // --- forward, one op at a time ------------------------------------------------------
  std::printf("\n===== forward =====\n");
  const Tensor Xc = X.detach();  // the forward by hand builds no graph
  const Tensor Q = matmul(Xc, W[0]) + b[0], K = matmul(Xc, W[1]) + b[1], V = matmul(Xc, W[2]) + b[2];
  print_matrix("Q = X W_Q + b_Q", Q, "what each token looks for (each head its own d_h columns)");
  print_matrix("K = X W_K + b_K", K, "what each token offers to be found by");
  print_matrix("V = X W_V + b_V", V, "what each token passes on when attended to");

  const Tensor M = causal_mask(n, DType::Float64);
  print_matrix("M", M, "causal mask: 0 where j <= i, -inf where j > i (token i sees only tokens 0..i)");

  attn.forward(Xc.reshape({1, n, d_model}));  // only for the module's A, compared below

  const double scale = 1.0 / std::sqrt(static_cast<double>(d_h));
  std::vector<Tensor> A_heads, Z_heads;
  for (int64_t h = 0; h < H; ++h) {
    std::printf("\n----- head %lld: columns %lld..%lld of Q, K, V -----\n", static_cast<long long>(h + 1),
                static_cast<long long>(h * d_h), static_cast<long long>((h + 1) * d_h - 1));
    const Tensor S = matmul(head(Q, h, d_h), T(head(K, h, d_h))) * scale;
    print_matrix("S = Q_h K_hᵀ / √d_k", S, "score of query i against key j; ÷√d_k keeps the scores' variance from growing with d_k");
    print_matrix("S + M", S + M, "future positions pushed to -inf");
    const Tensor A = softmax(S + M);
    print_matrix("A = softmax(S + M)", A, "each row: how token i spreads its attention");

    const Tensor row_sums = sum(A, 1);
    print_matrix("row sums of A", row_sums, "softmax makes each row a distribution");
    std::printf("max |row sum - 1| = %.1e\n", max_abs(row_sums - 1.0));
    const std::vector<double> a = A.to_vector();
    bool upper_zero = true;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) upper_zero = upper_zero && a[i * n + j] == 0.0;
    std::printf("upper triangle (j > i) exactly 0: %s   (exp(-inf) = 0 exactly)\n", upper_zero ? "yes" : "no");
    const double A_diff = max_abs(A - slice(A_module, 1, h, h + 1).reshape({n, n}));
    std::printf("A matches the module's (seen by a probe): %s (max |difference| %.1e)\n", A_diff < 1e-12 ? "yes" : "no",
                A_diff);

    A_heads.push_back(A);
    Z_heads.push_back(matmul(A, head(V, h, d_h)));
    print_matrix("Z_h = A V_h", Z_heads.back(), "row i: the attention-weighted mean of the visible V rows");
  }

  std::printf("\n----- heads merged -----\n");
  const Tensor Z = concat(Z_heads, 1);
  print_matrix("Concat(Z_1, ..., Z_H)", Z, "the heads side by side, as the module merges them");
  const Tensor O = matmul(Z, W[3]) + b[3];
  print_matrix("O = Concat(Z_1, ..., Z_H) W_O + b_O", O, "the heads mixed back into d_model features");
  const Tensor Y = Xc + O;
  print_matrix("Y = X + O", Y, "the residual: attention adds to X, it does not replace it");

  // The module's forward (the dense kernels) as the independent check.
  auto module_Y = [&] { return X + attn.forward(X.reshape({1, n, d_model})).reshape({n, d_model}); };
  const double Y_diff = max_abs(Y - module_Y().detach());
  std::printf("\nY matches module: %s (max |difference| %.1e)\n", Y_diff < 1e-12 ? "yes" : "no", Y_diff);

  // --- backward by hand ------------------------------------------------------------------
  // L = Σ Y ∘ R with R fixed: a scalar whose dL/dY is exactly R, so every entry of Y
  // gets a different upstream gradient (L = Σ Y would give all-equal ones).
  // Each step evaluates the formula of the docs/backprop.md section named beside it.
  std::printf("\n===== backward, by hand =====\n");
  print_matrix("R", R, "fixed weights of the loss L = Σ Y ∘ R, so dL/dY = R");
  const Tensor dY = R;
  const Tensor dO = dY;
  print_matrix("dO = dY", dO, "§13 The residual: Y = X + O passes dY through unchanged");
  const Tensor dW_O = matmul(T(Z), dO), db_O = sum(dO, 0), dConcat = matmul(dO, T(W[3]));
  print_matrix("dW_O = Concatᵀ dO", dW_O, "§11 Head split and concat; W_O");
  print_matrix("db_O = Σ_i dO_i", db_O, "§11");
  print_matrix("dConcat = dO W_Oᵀ", dConcat, "§11: head h gets its own d_h columns, dZ_h");

  std::vector<Tensor> dQ_heads, dK_heads, dV_heads;
  for (int64_t h = 0; h < H; ++h) {
    std::printf("\n----- head %lld -----\n", static_cast<long long>(h + 1));
    const Tensor& A = A_heads[static_cast<size_t>(h)];
    const Tensor Q_h = head(Q, h, d_h), K_h = head(K, h, d_h), V_h = head(V, h, d_h);
    const Tensor dZ = head(dConcat, h, d_h);
    print_matrix("dZ_h", dZ, "§11: columns of dConcat");
    const Tensor dA = matmul(dZ, T(V_h)), dV = matmul(T(A), dZ);
    print_matrix("dA = dZ V_hᵀ", dA,
                 "§10 Z = AV. Not 0 above the diagonal: dA_ij = dZ_i·V_j is how L would move if A_ij did, "
                 "masked or not; the mask zeroes dS, next");
    print_matrix("dV_h = Aᵀ dZ", dV, "§10: only the queries that see token j send it gradient");
    constexpr bool keepdim = true;
    const Tensor dS = A * (dA - sum(dA * A, 1, keepdim));
    if (tiny) {
      const Tensor S = matmul(Q_h, T(K_h)) * (1.0 / std::sqrt(static_cast<double>(d_h)));
      print_flash_row(S, V_h, A, dA, dZ, n - 1);
    }
    print_matrix("dS = A ∘ (dA − rowsum(dA ∘ A))", dS,
                 "§7 Softmax, §9 The causal mask: 0 where A is 0; each row sums to 0");
    const Tensor dQ = matmul(dS, K_h) * scale, dK = matmul(T(dS), Q_h) * scale;
    print_matrix("dQ_h = dS K_h / √d_k", dQ,
                 "§8 The scaled dot product. Row 0 is exactly 0: query 0 sees key 0 alone, so A_00 = 1 and "
                 "dS_00 = 1·(dA_00 − dA_00) = 0");
    print_matrix("dK_h = dSᵀ Q_h / √d_k", dK, "§8");
    dQ_heads.push_back(dQ);
    dK_heads.push_back(dK);
    dV_heads.push_back(dV);
  }

  std::printf("\n----- heads merged -----\n");
  const Tensor dQ = concat(dQ_heads, 1), dK = concat(dK_heads, 1), dV = concat(dV_heads, 1);
  print_matrix("dQ", dQ, "§11: the heads' columns side by side");
  print_matrix("dK", dK, "§11");
  print_matrix("dV", dV, "§11");
  const Tensor d_inputs[3] = {dQ, dK, dV};
  Tensor dW_by_hand[4], db_by_hand[4];
  for (int i = 0; i < 3; ++i) {
    const std::string t = tags[i];
    dW_by_hand[i] = matmul(T(Xc), d_inputs[i]);
    db_by_hand[i] = sum(d_inputs[i], 0);
    print_matrix("dW_" + t + " = Xᵀ d" + t, dW_by_hand[i], "§12 W_Q, W_K, W_V, and dX as a sum of three");
    print_matrix("db_" + t + " = Σ_i d" + t + "_i", db_by_hand[i], i == 1 ? "§12, §8: zero, up to rounding" : "§12");
  }
  dW_by_hand[3] = dW_O;
  db_by_hand[3] = db_O;
  const Tensor dX = dY + matmul(dQ, T(W[0])) + matmul(dK, T(W[1])) + matmul(dV, T(W[2]));
  print_matrix("dX = dY + dQ W_Qᵀ + dK W_Kᵀ + dV W_Vᵀ", dX, "§12 and §13: X reaches L four ways");

  // --- backward(), and central differences -------------------------------------------------
  std::printf("\n===== backward() and central differences =====\n");
  const Tensor L = sum(module_Y() * R);
  std::printf("\nL = %.10f\n", L.item());
  L.backward();
  for (int i = 0; i < 4; ++i) {
    print_agreement(std::string("dW_") + tags[i], dW_by_hand[i], W[i].grad());
    print_agreement(std::string("db_") + tags[i], db_by_hand[i], b[i].grad());
  }
  print_agreement("dX", dX, X.grad());

  // Central differences: (L(w + ε) − L(w − ε)) / 2ε, writing into the module's own
  // weight storage and re-running its forward. Error ~ ε² (truncation) + 1e-16/ε (rounding).
  const double eps = 1e-6;
  auto loss_value = [&] {
    NoGradGuard no_grad;
    return sum(module_Y() * R).item();
  };
  for (int i = 0; i < 4; ++i) {
    double* w = W[i].data<double>();
    std::vector<double> fd(W[i].numel());
    for (int64_t k = 0; k < W[i].numel(); ++k) {
      const double saved = w[k];
      w[k] = saved + eps;
      const double up = loss_value();
      w[k] = saved - eps;
      const double down = loss_value();
      w[k] = saved;
      fd[k] = (up - down) / (2 * eps);
    }
    const Tensor dW = W[i].grad(), dW_fd = Tensor::from_vector(fd, W[i].shape(), DType::Float64);
    const std::string t = tags[i];
    print_pair("dW_" + t + " (backward)", dW, "dW_" + t + " (central differences, eps = 1e-6)", dW_fd);
    const double abs_err = max_abs(dW - dW_fd);
    std::printf("max |dW_%s - FD| = %.2e, which is %.2e of max |dW_%s| = %.3g\n", t.c_str(), abs_err,
                abs_err / max_abs(dW_fd), t.c_str(), max_abs(dW_fd));
  }
  // The one gradient that is zero for a reason worth seeing: adding b_K adds q_i·b_K
  // to every score of row i, and softmax ignores a constant added to a whole row.
  std::printf("\nmax |db_K| = %.1e: a per-row constant in S does not change softmax (§8)\n", max_abs(b[1].grad()));
  return 0;
}
