#include "examples/char_lm/data.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ag::char_lm {

std::string resolve_data_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("ATTOGRAD_DATA"); env && *env) return env;
  return "data/tinyshakespeare.txt";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  AG_CHECK(in, "data: cannot open '" << path << "' (pass --data PATH, set ATTOGRAD_DATA, or run scripts/get_data.sh)");
  std::ostringstream text;
  text << in.rdbuf();
  AG_CHECK(!text.str().empty(), "data: '" << path << "' is empty");
  return text.str();
}

Tokenizer::Tokenizer(std::string chars) : chars_(std::move(chars)) {
  for (size_t i = 0; i < chars_.size(); ++i) {
    int64_t& id = id_of_byte_[static_cast<unsigned char>(chars_[i])];
    AG_CHECK(id < 0, "tokenizer: character " << static_cast<int>(static_cast<unsigned char>(chars_[i]))
                                             << " appears twice in the vocabulary");
    id = static_cast<int64_t>(i);
  }
}

Tokenizer Tokenizer::from_text(const std::string& text) {
  std::string chars = text;
  std::sort(chars.begin(), chars.end(), [](char a, char b) {
    return static_cast<unsigned char>(a) < static_cast<unsigned char>(b);
  });
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return Tokenizer(chars);
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    ids[i] = id_of_byte_[static_cast<unsigned char>(text[i])];
    AG_CHECK(ids[i] >= 0, "tokenizer: character '" << text[i] << "' is not in the model's vocabulary");
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) text += chars_.at(id);
  return text;
}

Dataset make_dataset(const std::string& text, int64_t block_size) {
  AG_CHECK(static_cast<int64_t>(text.size()) >= block_size + 1,
           "data: the text has " << text.size() << " characters, fewer than block_size + 1 = " << block_size + 1);
  Dataset data;
  data.tokenizer = Tokenizer::from_text(text);
  const std::vector<int64_t> ids = data.tokenizer.encode(text);
  const size_t n_train = ids.size() * 9 / 10;
  data.train.assign(ids.begin(), ids.begin() + n_train);
  data.val.assign(ids.begin() + n_train, ids.end());
  return data;
}

void get_batch(const std::vector<int64_t>& tokens, int64_t B, int64_t T, Generator& gen, Tensor& x, Tensor& y) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  AG_CHECK(n >= T + 1, "data: a split of " << n << " tokens is shorter than block_size + 1 = " << T + 1);
  std::vector<int64_t> xs(B * T), ys(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = static_cast<int64_t>(gen.integer(n - T));  // windows [start, start + T]
    std::copy_n(tokens.begin() + start, T, xs.begin() + b * T);
    std::copy_n(tokens.begin() + start + 1, T, ys.begin() + b * T);
  }
  x = Tensor::from_indices(xs, {B, T});
  y = Tensor::from_indices(ys, {B, T});
}

}  // namespace ag::char_lm
