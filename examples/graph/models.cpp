#include "examples/graph/models.h"

#include <cmath>
#include <string>

namespace ag::graph {

namespace {
// Glorot's uniform initialisation (GAT's reference code): U(−r, r), r = √(6 / (fan_in + fan_out)).
Tensor glorot(const Shape& shape, int64_t fan_in, int64_t fan_out, Generator* gen) {
  const double r = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return Tensor::uniform(shape, -r, r, DType::Float32, gen);
}
}  // namespace

GatLayer::GatLayer(int64_t in, int64_t heads, int64_t width, Generator* gen) : heads_(heads), width_(width) {
  W_ = register_parameter("W", glorot({in, heads * width}, in, width, gen));
  a1_ = register_parameter("a1", glorot({heads, width}, width, 1, gen));
  a2_ = register_parameter("a2", glorot({heads, width}, width, 1, gen));
  bias_ = register_parameter("bias", Tensor::zeros({heads * width}));
}

Tensor GatLayer::forward(const Tensor& x, const MaskMods& masks, const Dropouts& drop, AttentionInternals* internals) const {
  const int64_t N = x.size(0);
  const bool training = is_training();
  const Tensor h = matmul(dropout(x, drop.input, training, drop.gen), W_).reshape({1, N, heads_, width_});  // XW, BTHD
  SoftmaxAttention additive{.impl = AttentionImpl::Dense, .score = AttentionScore::Additive, .leaky_slope = 0.2};
  additive.masks = masks;  // over the edges, the op ignores impl (O(E·d) per head)
  additive.dropout = {.p = drop.attention, .training = training, .generator = drop.gen};
  // q_i = h_i ∘ a₁ and k_j = h_j ∘ a₂: the op sums each row, a₁ᵀWh_i and a₂ᵀWh_j (AttentionScore::Additive)
  const Tensor z = attention(h * a1_, h * a2_, dropout(h, drop.input, training, drop.gen),
                             {.function = additive, .layout = AttentionLayout::BTHD}, internals);
  return z.reshape({N, heads_ * width_}) + bias_;
}

GatModel::GatModel(int64_t features, int64_t heads, int64_t hidden, int64_t classes, Generator* gen, AttentionPath path)
    : path_(path) {
  hidden_ = register_module("hidden", std::make_shared<GatLayer>(features, heads, hidden, gen));
  output_ = register_module("output", std::make_shared<GatLayer>(heads * hidden, 1, classes, gen));
}

MaskMods GatModel::masks(const GraphTensors& g) const {
  MaskMods m;
  if (path_ == AttentionPath::Edges) m.edges = g.edges;
  else m.adjacency = g.adjacency;
  return m;
}

Tensor GatModel::forward(const GraphTensors& g, const Dropouts& drop) const {
  const MaskMods m = masks(g);
  return output_->forward(elu(hidden_->forward(g.features, m, drop)), m, drop);
}

GatModel::Attention GatModel::attention(const GraphTensors& g) const {
  const NoGradGuard no_grad;
  const MaskMods m = masks(g);
  AttentionInternals hidden, output;
  output_->forward(elu(hidden_->forward(g.features, m, {}, &hidden)), m, {}, &output);
  return {.hidden = hidden.probabilities, .output = output.probabilities};
}

GraphTransformer::GraphTransformer(const Config& config, Generator* gen) : config_(config) {
  const int64_t C = config.heads * config.width;
  input_ = register_module("input", std::make_shared<nn::Linear>(nn::Linear::Config{config.features, C}, gen));
  degree_ = register_parameter("degree", Tensor::randn({config.max_degree + 1, C}, DType::Float32, gen) * 0.02);
  distance_bias_ = register_parameter("distance_bias", Tensor::zeros({config.heads, config.max_distance + 3}));
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    ln1_.push_back(register_module(p + "ln1", std::make_shared<nn::LayerNorm>(C)));
    qkv_.push_back(register_module(p + "qkv", std::make_shared<nn::Linear>(nn::Linear::Config{C, 3 * C}, gen)));
    proj_.push_back(register_module(p + "proj", std::make_shared<nn::Linear>(nn::Linear::Config{C, C}, gen)));
    ln2_.push_back(register_module(p + "ln2", std::make_shared<nn::LayerNorm>(C)));
    fc_.push_back(register_module(p + "fc", std::make_shared<nn::Linear>(nn::Linear::Config{C, 2 * C}, gen)));
    fc_out_.push_back(register_module(p + "fc_out", std::make_shared<nn::Linear>(nn::Linear::Config{2 * C, C}, gen)));
  }
  ln_final_ = register_module("ln_final", std::make_shared<nn::LayerNorm>(C));
  head_ = register_module("head", std::make_shared<nn::Linear>(nn::Linear::Config{C, config.classes}, gen));
}

// x + Attn(LN(x)), then + MLP(LN(·)): S = QKᵀ/√d_h + b[h, φ(i, j)] over A + I or every pair.
// Over A + I's edge list the bias reads φ per edge (g.edge_distance, [E]): O(E·d) per head.
Tensor GraphTransformer::block(int64_t l, const Tensor& x, const GraphTensors& g, const Dropouts& drop) const {
  const int64_t N = x.size(0), H = config_.heads, d = config_.width, C = H * d;
  const bool training = is_training();
  const std::vector<Tensor> qkv = split(qkv_[l]->forward(ln1_[l]->forward(x)), {C, C, C}, 1);
  SoftmaxAttention dot{.impl = AttentionImpl::Dense};
  dot.mods.indexed = {.table = distance_bias_, .index = g.distance};
  if (!config_.complete && config_.path == AttentionPath::Edges) {
    dot.masks.edges = g.edges;  // the op ignores impl over the edges
    dot.mods.indexed.index = g.edge_distance;
  } else if (!config_.complete) {
    dot.masks.adjacency = g.adjacency;
  }
  dot.dropout = {.p = drop.attention, .training = training, .generator = drop.gen};
  const auto heads = [&](const Tensor& t) { return t.reshape({1, N, H, d}); };
  const Tensor z = attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {.function = dot, .layout = AttentionLayout::BTHD});
  const Tensor y = x + dropout(proj_[l]->forward(z.reshape({N, C})), drop.input, training, drop.gen);
  const Tensor m = fc_out_[l]->forward(gelu(fc_[l]->forward(ln2_[l]->forward(y))));
  return y + dropout(m, drop.input, training, drop.gen);
}

Tensor GraphTransformer::forward(const GraphTensors& g, const Dropouts& drop) const {
  const bool training = is_training();
  Tensor x = input_->forward(dropout(g.features, drop.input, training, drop.gen)) + embedding(degree_, g.degree);
  for (int64_t l = 0; l < config_.layers; ++l) x = block(l, x, g, drop);
  return head_->forward(dropout(ln_final_->forward(x), drop.input, training, drop.gen));
}

}  // namespace ag::graph
