// char_lm sample's options, one line each (core/options.h explains the columns).
#pragma once
#include "examples/common/device_option.h"

//  kind   type         name         default  min   max       help
#define AG_CHAR_LM_SAMPLE_OPTIONS(X) \
  X(Local, std::string, ckpt,        "out",   0,    0,        "checkpoint directory (holding model.safetensors)") \
  X(Local, std::string, prompt,      "",      0,    0,        "text to continue (default: the start of a line)") \
  X(Local, int64_t,     tokens,      500,     0,    1 << 24,  "characters to generate") \
  X(Local, double,      temperature, 0.8,     1e-6, kNoLimit, "softmax temperature") \
  X(Local, int64_t,     top_k,       200,     0,    1 << 24,  "sample among the k likeliest (0: all)") \
  X(Local, uint64_t,    seed,        1337,    0,    kNoLimit, "random seed") \
  X(Local, bool,        no_kv_cache, false,   0,    0,        "rerun the whole context for every character instead of caching each layer's keys and values (a linear-attention or ssd model: its recurrent state)") \
  X(Local, int64_t,     max_context, 0,       0,    1 << 24,  "positions a rope, alibi or none model conditions on before generation stops (0: 4 x block_size); a model with an attention window rolls its cache instead and goes on") \
  X(Local, std::string, documents,   "",      0,    0,        "the separator of a model trained with train --documents: after it, generation starts a new document (the context and cache emptied, positions from 0), as the model saw each in training") \
  X(Local, std::string, tree,        "",      0,    0,        "score these continuations of --prompt instead of sampling: candidates separated by '|', run as one token tree (their shared beginnings once) in one cached forward; prints each one's log-probability") \
  AG_DEVICE_OPTION(X)
