// char_lm's data is the text data every example shares (examples/common/text_data.h):
// its names, as char_lm's code uses them.
#pragma once
#include "examples/common/text_data.h"

namespace ag::char_lm {
using text::Dataset;
using text::decode_utf8;
using text::encode_utf8;
using text::get_batch;
using text::make_dataset;
using text::next_code_point;
using text::read_text;
using text::resolve_data_path;
using text::TokenIds;
using text::Tokenizer;
}  // namespace ag::char_lm
