// Causal self-attention on 4 tokens, every intermediate printed: the study aid
// for docs/backprop.md. n = 4 tokens, d_model = 8, H = 2 heads, d_h = d_k = 4.
//
//   Q = X W_Q + b_Q,  K = X W_K + b_K,  V = X W_V + b_V      X, Q, K, V [n, d_model]
//   per head h:  S_h = Q_h K_hᵀ / √d_k,  A_h = softmax(S_h + M),  Z_h = A_h V_h
//   O = Concat(Z_1, Z_2) W_O + b_O,  Y = X + O
//
// The step-by-step values come from core ops on the module's own parameters and
// are checked against nn::MultiHeadSelfAttention; then backward() from
// L = Σ Y ∘ R is checked against central differences. Everything is float64.
//
//   ./build/attention_walkthrough [--seed N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/attention.h"

using namespace ag;

namespace {

constexpr int64_t n = 4, d_model = 8, H = 2, d_h = d_model / H;

std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// One aligned cell. Exact zeros print as "0" (not "0.0000") so the masked upper
// triangle of A is visibly exact; −inf prints as "-inf".
std::string cell(double v) {
  char buf[32];
  if (v == 0.0)
    std::snprintf(buf, sizeof buf, "%9s", "0");
  else
    std::snprintf(buf, sizeof buf, "%9.4f", v);
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
  const int width = static_cast<int>(9 * a.size(-1));
  std::printf("\n%-*s  |  %s  %s\n", width, left.c_str(), right.c_str(), shape_string(a).c_str());
  for (int64_t r = 0; r < rows(a); ++r) std::printf("%s  |%s\n", row(a, r).c_str(), row(b, r).c_str());
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::abs(v));
  return m;
}

// Columns h·d_h .. (h+1)·d_h − 1 of [n, d_model]: head h's slice, as the module splits heads.
Tensor head(const Tensor& t, int64_t h) { return slice(t, 1, h * d_h, (h + 1) * d_h); }

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else {
      std::printf("usage: attention_walkthrough [--seed N]   (default seed 1)\n"
                  "Prints every step of causal multi-head self-attention on 4 tokens\n"
                  "(d_model = 8, 2 heads) and checks the gradients by finite differences.\n");
      return std::strcmp(argv[i], "--help") ? 2 : 0;
    }
  }

  // Draw order fixes every number: the module's W and b, then X, then R.
  Generator gen(seed);
  nn::MultiHeadSelfAttention attn(d_model, H, /*causal=*/true, /*dropout=*/0.0, nn::AttentionImpl::Dense, &gen);
  attn.to(DType::Float64);
  attn.set_keep_attention(true);
  const Tensor X = Tensor::randn({n, d_model}, DType::Float64, &gen);
  const Tensor R = Tensor::randn({n, d_model}, DType::Float64, &gen);

  // The module's parameters by name ("w_q.weight", "w_q.bias", ...). These tensors
  // share storage with the module, so writing into them perturbs the module.
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

  std::printf("Causal multi-head self-attention, step by step (seed %llu, float64)\n",
              static_cast<unsigned long long>(seed));
  std::printf("n = %lld tokens, d_model = %lld, H = %lld heads, d_k = d_h = d_model / H = %lld\n",
              static_cast<long long>(n), static_cast<long long>(d_model), static_cast<long long>(H),
              static_cast<long long>(d_h));
  print_matrix("X", X, "the input: one row per token");
  for (int i = 0; i < 4; ++i) {
    print_matrix(std::string("W_") + tags[i], W[i], std::string("attn.") + names[i] + ".weight, stored [in, out]");
    print_matrix(std::string("b_") + tags[i], b[i],
                 std::string("attn.") + names[i] + ".bias: the module's Linear layers have biases");
  }

  // --- forward, one op at a time ------------------------------------------------------
  std::printf("\n===== forward =====\n");
  const Tensor Q = matmul(X, W[0]) + b[0], K = matmul(X, W[1]) + b[1], V = matmul(X, W[2]) + b[2];
  print_matrix("Q = X W_Q + b_Q", Q, "what each token looks for (columns 0-3 head 1, 4-7 head 2)");
  print_matrix("K = X W_K + b_K", K, "what each token offers to be found by");
  print_matrix("V = X W_V + b_V", V, "what each token passes on when attended to");

  const Tensor M = causal_mask(n, DType::Float64);
  print_matrix("M", M, "causal mask: 0 where j <= i, -inf where j > i (token i sees only tokens 0..i)");

  attn.forward(X.reshape({1, n, d_model}));  // only for the module's A, compared below
  const Tensor A_module = attn.attention();  // [1, H, n, n]

  std::vector<Tensor> Z_heads;
  for (int64_t h = 0; h < H; ++h) {
    std::printf("\n----- head %lld: columns %lld..%lld of Q, K, V -----\n", static_cast<long long>(h + 1),
                static_cast<long long>(h * d_h), static_cast<long long>((h + 1) * d_h - 1));
    const Tensor S = matmul(head(Q, h), transpose(head(K, h), 0, 1)) / std::sqrt(static_cast<double>(d_h));
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
    std::printf("A matches the module's attention(): %s (max |difference| %.1e)\n", A_diff < 1e-12 ? "yes" : "no",
                A_diff);

    Z_heads.push_back(matmul(A, head(V, h)));
    print_matrix("Z_h = A V_h", Z_heads.back(), "row i: the attention-weighted mean of the visible V rows");
  }

  std::printf("\n----- heads merged -----\n");
  const Tensor Z = concat(Z_heads, 1);
  print_matrix("Concat(Z_1, Z_2)", Z, "the heads side by side, as the module merges them");
  const Tensor O = matmul(Z, W[3]) + b[3];
  print_matrix("O = Concat(Z_1, Z_2) W_O + b_O", O, "the heads mixed back into d_model features");
  const Tensor Y = X + O;
  print_matrix("Y = X + O", Y, "the residual: attention adds to X, it does not replace it");

  // The module's forward (the dense kernels) as the independent check.
  auto module_Y = [&] { return X + attn.forward(X.reshape({1, n, d_model})).reshape({n, d_model}); };
  const double Y_diff = max_abs(Y - module_Y());
  std::printf("\nY matches module: %s (max |difference| %.1e)\n", Y_diff < 1e-12 ? "yes" : "no", Y_diff);

  // --- backward ------------------------------------------------------------------------
  // L = Σ Y ∘ R with R fixed: a scalar whose dL/dY is exactly R, so every entry of Y
  // gets a different upstream gradient (L = Σ Y would give all-equal ones).
  std::printf("\n===== backward =====\n");
  print_matrix("R", R, "fixed N(0, 1) weights of the loss L = Σ Y ∘ R, so dL/dY = R");
  const Tensor L = sum(module_Y() * R);
  std::printf("\nL = %.10f\n", L.item());
  L.backward();

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
    std::printf("max |dW_%s - FD| = %.2e, relative to max |dW_%s| = %.2e\n", t.c_str(), abs_err, t.c_str(),
                abs_err / max_abs(dW_fd));
  }
  // The one gradient that is zero for a reason worth seeing: adding b_K adds q_i·b_K
  // to every score of row i, and softmax ignores a constant added to a whole row.
  std::printf("\nmax |db_K| = %.1e: a per-row constant in S does not change softmax\n", max_abs(b[1].grad()));
  return 0;
}
