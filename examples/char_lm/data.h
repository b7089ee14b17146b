// The character-level data: the text, its tokenizer, the 90/10 split and
// random training windows.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ag::char_lm {

// The text file to train on: `flag` if given, else $ATTOGRAD_DATA, else
// data/tinyshakespeare.txt (scripts/get_data.sh fetches it).
std::string resolve_data_path(const std::string& flag);
// The whole file; ag::Error naming the path if it is missing or empty.
std::string read_text(const std::string& path);

// Tokens are the sorted unique bytes of the training text.
class Tokenizer {
 public:
  Tokenizer() = default;
  explicit Tokenizer(std::string chars);  // the vocabulary, sorted, unique
  static Tokenizer from_text(const std::string& text);

  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  const std::string& chars() const { return chars_; }
  std::vector<int64_t> encode(const std::string& text) const;  // ag::Error on a byte not in the vocabulary
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::string chars_;
  std::vector<int64_t> id_of_byte_ = std::vector<int64_t>(256, -1);
};

struct Dataset {
  Tokenizer tokenizer;
  std::vector<int64_t> train, val;  // the first 90% of the tokens, and the rest
};
// ag::Error if the text is shorter than block_size + 1 (no window fits).
Dataset make_dataset(const std::string& text, int64_t block_size);

// B windows of T + 1 tokens at offsets drawn from `gen`: x = tokens [0, T),
// y = tokens [1, T + 1), both int64 [B, T].
void get_batch(const std::vector<int64_t>& tokens, int64_t B, int64_t T, Generator& gen, Tensor& x, Tensor& y);

}  // namespace ag::char_lm
