#include "examples/common/text_data.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace ag::text {

std::string resolve_data_path(const std::string& flag, const std::string& root) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("ATTOGRAD_DATA"); env && *env) return env;
  const std::filesystem::path base(root);
  const std::filesystem::path candidates[] = {base / "data/tinyshakespeare.txt",
                                              base / "../shared/data/tinyshakespeare.txt"};
  for (const std::filesystem::path& candidate : candidates)
    if (std::filesystem::is_regular_file(candidate)) return candidate.lexically_normal().string();
  return candidates[0].lexically_normal().string();
}

std::string read_text(const std::string& path) {
  AG_CHECK(std::filesystem::exists(path),
           "data: '" << path << "' does not exist (pass --data PATH, set ATTOGRAD_DATA, or run scripts/get_data.sh)");
  AG_CHECK(!std::filesystem::is_directory(path),
           "data: '" << path << "' is a directory; pass the text file itself (--data " << path
                     << "/tinyshakespeare.txt, say)");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  AG_CHECK(in, "data: cannot open '" << path << "' (pass --data PATH, set ATTOGRAD_DATA, or run scripts/get_data.sh)");
  // Read straight into a string of the file's size: the text is held once.
  std::string text(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  AG_CHECK(in.read(text.data(), static_cast<std::streamsize>(text.size())), "data: cannot read '" << path << "'");
  AG_CHECK(!text.empty(), "data: '" << path << "' is empty");
  try {
    for (size_t offset = 0; offset < text.size();) next_code_point(text, offset);
  } catch (const Error& e) {
    throw Error("data: '" + path + "' is not UTF-8 text: " + e.what() +
                " (convert it first, e.g. iconv -f latin1 -t utf-8 for Latin-1)");
  }
  return text;
}

namespace {
std::string hex_byte(unsigned char b) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "0x%02X", b);
  return buffer;
}

std::string code_point_name(char32_t c) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(c));
  return buffer;
}

// "'é' (U+00E9)"; control characters by their code point alone.
std::string describe_character(char32_t c) {
  if (c < 0x20 || c == 0x7F) return code_point_name(c);
  const std::string glyph = encode_utf8(std::u32string(1, c));
  return "'" + glyph + "' (" + code_point_name(c) + ")";
}

[[noreturn]] void invalid_utf8(size_t offset, const std::string& why) {
  throw Error("invalid UTF-8 at byte offset " + std::to_string(offset) + ": " + why);
}
}  // namespace

char32_t next_multibyte_code_point(std::string_view bytes, size_t& offset) {
  const size_t i = offset;
  const unsigned char lead = static_cast<unsigned char>(bytes[i]);
  // The lead byte's high bits give the length; its low bits the top of the code point.
  if ((lead & 0xC0) == 0x80) invalid_utf8(i, "byte " + hex_byte(lead) + " continues a character that never started");
  if (lead >= 0xF8) invalid_utf8(i, "byte " + hex_byte(lead) + " never occurs in UTF-8");
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  const char32_t shortest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;  // the least needing `length` bytes
  if (i + length > bytes.size())
    invalid_utf8(i, "byte " + hex_byte(lead) + " starts a " + std::to_string(length) +
                        "-byte character, but the text ends after " + std::to_string(bytes.size() - i));
  char32_t c = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    const unsigned char next = static_cast<unsigned char>(bytes[i + k]);
    if ((next & 0xC0) != 0x80)
      invalid_utf8(i + k, "byte " + hex_byte(next) + " should continue the " + std::to_string(length) +
                              "-byte character that byte " + hex_byte(lead) + " at offset " + std::to_string(i) +
                              " starts");
    c = (c << 6) | (next & 0x3F);
  }
  if (c < shortest) invalid_utf8(i, "an overlong encoding of " + code_point_name(c));
  if (c >= 0xD800 && c <= 0xDFFF) invalid_utf8(i, "a UTF-16 surrogate, " + code_point_name(c));
  if (c > 0x10FFFF) invalid_utf8(i, code_point_name(c) + " is beyond U+10FFFF");
  offset += length;
  return c;
}

std::u32string decode_utf8(std::string_view bytes) {
  std::u32string characters;
  characters.reserve(bytes.size());
  for (size_t offset = 0; offset < bytes.size();) characters += next_code_point(bytes, offset);
  return characters;
}

std::string encode_utf8(std::u32string_view characters) {
  std::string bytes;
  bytes.reserve(characters.size());
  for (const char32_t c : characters) {
    if (c < 0x80) {
      bytes += static_cast<char>(c);
    } else if (c < 0x800) {
      bytes += static_cast<char>(0xC0 | (c >> 6));
      bytes += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      bytes += static_cast<char>(0xE0 | (c >> 12));
      bytes += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      bytes += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      bytes += static_cast<char>(0xF0 | (c >> 18));
      bytes += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      bytes += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      bytes += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return bytes;
}

Tokenizer::Tokenizer(std::u32string characters) : characters_(std::move(characters)) {
  for (size_t i = 0; i < characters_.size(); ++i) {
    const char32_t c = characters_[i];
    const bool added = c < ascii_id_.size() ? std::exchange(ascii_id_[c], static_cast<int32_t>(i + 1)) == 0
                                            : id_of_.emplace(c, static_cast<int64_t>(i)).second;
    // char_lm before UTF-8 support wrote every byte >= 0x80 of the vocabulary as U+FFFD.
    AG_CHECK(added, "tokenizer: character " << describe_character(characters_[i]) << " appears twice in the vocabulary"
                                            << (characters_[i] == 0xFFFD
                                                    ? " (a checkpoint from a char_lm older than its UTF-8 support, "
                                                      "trained on non-ASCII text: its vocabulary was not saved and "
                                                      "cannot be recovered; train again)"
                                                    : ""));
  }
}

Tokenizer Tokenizer::from_text(const std::string& text) {
  std::vector<uint8_t> seen(0x110000);  // one byte per code point: 1.1 MB, whatever the text's size
  for (size_t offset = 0; offset < text.size();) seen[next_code_point(text, offset)] = 1;
  std::u32string characters;
  for (char32_t c = 0; c < seen.size(); ++c)
    if (seen[c]) characters += c;
  return Tokenizer(std::move(characters));
}

Metadata Tokenizer::to_metadata() const {
  constexpr int one_line = -1;
  constexpr bool ensure_ascii = true;
  return {{"chars", nlohmann::json(chars()).dump(one_line, ' ', ensure_ascii)}};
}

Tokenizer Tokenizer::from_metadata(const Metadata& metadata) {
  const auto chars = metadata.find("chars");
  if (chars == metadata.end()) return {};
  std::string text;
  try {
    text = nlohmann::json::parse(chars->second).get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tokenizer: __metadata__ 'chars' is not a JSON string: ") + e.what());
  }
  try {
    return Tokenizer(decode_utf8(text));
  } catch (const Error& e) {
    throw Error(std::string("tokenizer: __metadata__ 'chars': ") + e.what());
  }
}

std::optional<int64_t> Tokenizer::id(char32_t character) const {
  if (character < ascii_id_.size()) {
    const int32_t id_plus_1 = ascii_id_[character];
    return id_plus_1 == 0 ? std::nullopt : std::optional<int64_t>(id_plus_1 - 1);
  }
  const auto found = id_of_.find(character);
  if (found == id_of_.end()) return std::nullopt;
  return found->second;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  const std::u32string characters = decode_utf8(text);
  std::vector<int64_t> ids(characters.size());
  for (size_t i = 0; i < characters.size(); ++i) {
    const std::optional<int64_t> found = id(characters[i]);
    AG_CHECK(found, "tokenizer: character " << describe_character(characters[i])
                                            << " is not in the model's vocabulary");
    ids[i] = *found;
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::u32string characters(ids.size(), U'\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    AG_CHECK(ids[i] >= 0 && ids[i] < vocab_size(),
             "tokenizer: id " << ids[i] << " is outside the vocabulary [0, " << vocab_size() << ")");
    characters[i] = characters_[static_cast<size_t>(ids[i])];
  }
  return encode_utf8(characters);
}

TokenIds::TokenIds(int64_t vocab_size, size_t count) {
  if (vocab_size <= 1 << 8) ids_ = std::vector<uint8_t>(count);
  else if (vocab_size <= 1 << 16) ids_ = std::vector<uint16_t>(count);
  else ids_ = std::vector<uint32_t>(count);  // code points stop at U+10FFFF
}

size_t TokenIds::size() const {
  return std::visit([](const auto& ids) { return ids.size(); }, ids_);
}

size_t TokenIds::bytes_per_id() const {
  return std::visit([](const auto& ids) { return sizeof(ids[0]); }, ids_);
}

int64_t TokenIds::operator[](size_t i) const {
  return std::visit([i](const auto& ids) { return static_cast<int64_t>(ids[i]); }, ids_);
}

void TokenIds::set(size_t i, int64_t id) {
  std::visit([&](auto& ids) { ids[i] = static_cast<std::decay_t<decltype(ids[0])>>(id); }, ids_);
}

void TokenIds::copy_to(size_t start, size_t count, int64_t* out) const {
  std::visit([&](const auto& ids) { std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start), count, out); }, ids_);
}

Dataset make_dataset(const std::string& text, int64_t block_size) {
  Dataset data;
  data.tokenizer = Tokenizer::from_text(text);
  // The text is valid UTF-8 by now: its characters are its bytes that do not continue one.
  const size_t n = static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char b) { return (static_cast<unsigned char>(b) & 0xC0) != 0x80; }));
  const size_t n_train = n * 9 / 10;
  // Checked here, before --out is touched.
  AG_CHECK(static_cast<int64_t>(n_train) >= block_size + 1,
           "data: the text has " << n << " characters, and its training split (the first 90%) " << n_train
                                 << ", fewer than block_size + 1 = " << block_size + 1);
  AG_CHECK(n - n_train >= 2, "data: the text has " << n << " characters, and its validation split (the last 10%) "
                                                   << n - n_train << ", fewer than the 2 of one window");
  data.eval_window = std::min(block_size, static_cast<int64_t>(n - n_train) - 1);
  data.train = TokenIds(data.tokenizer.vocab_size(), n_train);
  data.val = TokenIds(data.tokenizer.vocab_size(), n - n_train);
  size_t i = 0;
  for (size_t offset = 0; offset < text.size(); ++i) {
    const int64_t id = *data.tokenizer.id(next_code_point(text, offset));
    if (i < n_train) data.train.set(i, id);
    else data.val.set(i - n_train, id);
  }
  return data;
}

void get_batch(const TokenIds& tokens, int64_t B, int64_t T, Generator& gen, Tensor& x, Tensor& y) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  AG_CHECK(n >= T + 1, "data: a split of " << n << " tokens is shorter than block_size + 1 = " << T + 1);
  std::vector<int64_t> xs(B * T), ys(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = static_cast<int64_t>(gen.integer(n - T));  // windows [start, start + T]
    tokens.copy_to(start, T, xs.data() + b * T);
    tokens.copy_to(start + 1, T, ys.data() + b * T);
  }
  x = Tensor::from_indices(xs, {B, T});
  y = Tensor::from_indices(ys, {B, T});
}

std::vector<int64_t> separator_ids(const std::string& separator, const Tokenizer& tokenizer, const TokenIds& tokens,
                                   int64_t block_size) {
  const std::vector<int64_t> ids = tokenizer.encode(separator);
  if (ids.empty()) return ids;
  const size_t n = ids.size(), size = tokens.size();
  size_t start = 0, found = 0, longest = 0, longest_start = 0;  // each document is [start, after its separator)
  for (size_t at = 0; at + n <= size; ++at) {
    size_t k = 0;
    while (k < n && tokens[at + k] == ids[k]) ++k;
    if (k < n) continue;
    ++found;
    if (at + n - start > longest) longest = at + n - start, longest_start = start;
    start = at + n;
    at += n - 1;
  }
  if (found == 0)
    throw Error("--documents: the training text holds no separator \"" + separator +
                "\" (nothing to split it into documents at)");
  if (size - start > longest) longest = size - start, longest_start = start;  // the text after the last separator
  AG_CHECK(static_cast<int64_t>(longest) <= block_size,
           "--documents: the training text's document at token " << longest_start << " holds " << longest
               << " tokens, more than --block-size " << block_size
               << ": packing needs documents a window holds whole (raise --block-size, or separate the text finer)");
  return ids;
}

Tensor document_ids(const Tensor& x, const std::vector<int64_t>& separator) {
  const std::vector<double> tokens = x.to_vector();
  const int64_t T = x.size(1), n = static_cast<int64_t>(separator.size());
  std::vector<int64_t> ids(tokens.size());
  for (size_t row = 0; row < tokens.size(); row += static_cast<size_t>(T)) {
    int64_t doc = 0;
    for (int64_t t = 0; t < T; ++t) {
      ids[row + t] = doc;
      bool ends = t + 1 >= n;
      for (int64_t k = 0; ends && k < n; ++k) ends = static_cast<int64_t>(tokens[row + t + 1 - n + k]) == separator[k];
      if (ends) ++doc;
    }
  }
  return Tensor::from_indices(ids, x.shape());
}

}  // namespace ag::text
