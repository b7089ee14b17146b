// The character-level data of every program that trains on a text (char_lm,
// the lab's text task): the text, its tokenizer, the 90/10 split and
// random training windows.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace ag::text {

// The text file to train on: `flag` if given, else $ATTOGRAD_DATA, else the
// first of data/tinyshakespeare.txt and ../shared/data/tinyshakespeare.txt
// that exists under `root` (char_lm: the current directory; the tests: the
// checkout). When neither exists, the first, so the error names where to put it.
std::string resolve_data_path(const std::string& flag, const std::string& root = ".");
// The whole file; ag::Error naming the path if it is missing, a directory,
// empty, or not UTF-8 (then with the byte offset of the first bad byte).
std::string read_text(const std::string& path);

// UTF-8 (RFC 3629) to code points and back. Decoding rejects what is not
// UTF-8 (stray continuation bytes, truncated or overlong sequences, UTF-16
// surrogates, values above U+10FFFF) with an ag::Error naming the byte offset.
// next_code_point decodes the character at bytes[offset] and moves offset past
// it: a loop over it reads a text of gigabytes without a copy of its characters.
// ASCII, a text's usual byte, is decoded here; the rest by next_multibyte_code_point.
char32_t next_multibyte_code_point(std::string_view bytes, size_t& offset);
inline char32_t next_code_point(std::string_view bytes, size_t& offset) {
  const unsigned char lead = static_cast<unsigned char>(bytes[offset]);
  if (lead >= 0x80) return next_multibyte_code_point(bytes, offset);
  ++offset;
  return lead;
}
std::u32string decode_utf8(std::string_view bytes);
std::string encode_utf8(std::u32string_view characters);

// Tokens are characters, i.e. Unicode code points: the sorted unique code
// points of the training text (nanoGPT's shakespeare_char takes the sorted set
// of a Python str, which is the same thing). Code points rather than bytes, so
// a token is a character the reader sees ("é", "中", "😀" are one token each,
// not two to four), and every sequence of tokens decodes to valid UTF-8: a
// sampled byte could end in the middle of a character. For ASCII text the two
// coincide, ids included.
class Tokenizer {
 public:
  Tokenizer() = default;
  // The vocabulary in id order; ag::Error if a character appears twice.
  explicit Tokenizer(std::u32string characters);
  static Tokenizer from_text(const std::string& text);  // UTF-8 text

  // The vocabulary as checkpoint metadata, one key: "chars", a JSON string of
  // the characters in id order (non-ASCII ones \u-escaped, so the header stays
  // ASCII). Checkpoints from before UTF-8 support hold the same key with ASCII
  // characters only, and read the same.
  Metadata to_metadata() const;
  // The inverse; an empty Tokenizer when `metadata` has no "chars" (a weights
  // file written by another program). ag::Error if "chars" is malformed.
  static Tokenizer from_metadata(const Metadata& metadata);

  int64_t vocab_size() const { return static_cast<int64_t>(characters_.size()); }
  const std::u32string& characters() const { return characters_; }
  std::string chars() const { return encode_utf8(characters_); }  // the vocabulary as UTF-8 text
  std::optional<int64_t> id(char32_t character) const;
  // UTF-8 text to ids; ag::Error on invalid UTF-8 or a character not in the vocabulary.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::u32string characters_;
  std::array<int32_t, 128> ascii_id_{};        // an ASCII character's id + 1 (a text's usual one), or 0
  std::unordered_map<char32_t, int64_t> id_of_;  // every other character's
};

// A sequence of token ids, each held in the narrowest unsigned integer that
// holds every id of a vocabulary of `vocab_size`: one byte each for up to 256
// characters (tiny Shakespeare has 65), two for up to 65,536, else four. So the
// ids of a 2 GB ASCII text take 2 GB, where int64 ids took 16.
class TokenIds {
 public:
  TokenIds() = default;
  TokenIds(int64_t vocab_size, size_t count);  // `count` ids, all 0

  size_t size() const;
  size_t bytes_per_id() const;
  int64_t operator[](size_t i) const;
  void set(size_t i, int64_t id);  // id in [0, vocab_size)
  // ids [start, start + count) into out[0, count)
  void copy_to(size_t start, size_t count, int64_t* out) const;

 private:
  std::variant<std::vector<uint8_t>, std::vector<uint16_t>, std::vector<uint32_t>> ids_;
};

struct Dataset {
  Tokenizer tokenizer;
  TokenIds train, val;  // the first 90% of the tokens, and the rest
  // The windows evaluations score on both splits: block_size, or when the
  // validation split is shorter than a block (a block of 131072 on tiny
  // Shakespeare's 111540), the whole split less its last token.
  int64_t eval_window = 0;
};
// Tokenizes the text in place: its ids are the only copy made (see TokenIds).
// ag::Error if the training split (the first 90%) is shorter than block_size + 1
// characters (no window fits), or the validation split shorter than 2.
Dataset make_dataset(const std::string& text, int64_t block_size);

// B windows of T + 1 tokens at offsets drawn from `gen`: x = tokens [0, T),
// y = tokens [1, T + 1), both int64 [B, T].
void get_batch(const TokenIds& tokens, int64_t B, int64_t T, Generator& gen, Tensor& x, Tensor& y);

// --- packed documents (char_lm train --documents SEP) ---
// The separator's ids (none for an empty separator), checked to occur in `tokens` (the training
// split) and to cut it into documents of at most `block_size` tokens each (the separator included:
// packing is for documents a window can hold whole); ag::Error naming the longest one otherwise.
std::vector<int64_t> separator_ids(const std::string& separator, const Tokenizer& tokenizer, const TokenIds& tokens,
                                   int64_t block_size);
// Each position's document in each row of x [B, T]: ids count the separators (token
// sequences `separator`) that end before the position, so a separator closes its document.
Tensor document_ids(const Tensor& x, const std::vector<int64_t>& separator);

}  // namespace ag::text
