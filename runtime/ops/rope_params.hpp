#pragma once
/// Typed parameters of the rope op, and the frequency computation every rope kernel shares.
///
/// The frequencies follow transformers (modeling_rope_utils.py, v5) in float32 as it
/// computes them, so kernels on every backend rotate by the same angles.

#include <cstdint>
#include <vector>

#include "runtime/op.hpp"

namespace mpakt::ops {

/// The rope_scaling / rope_parameters object of a config.json, read once at parse time.
struct rope_scaling {
  enum class kind : std::uint8_t { none, linear, dynamic, yarn, longrope, llama3 };
  kind type = kind::none;
  double factor = 1;               ///< linear, dynamic, yarn, llama3; longrope when given
  bool has_factor = false;
  double original_max = 0;         ///< original_max_position_embeddings (yarn, longrope, llama3)
  double max_positions = 0;        ///< max_position_embeddings (dynamic; longrope's default factor)
  bool has_max_positions = false;
  double beta_fast = 32;           ///< yarn
  double beta_slow = 1;            ///< yarn
  double mscale = 0;               ///< yarn; 0 = absent (transformers tests truthiness)
  double mscale_all_dim = 0;       ///< yarn; 0 = absent
  bool truncate = true;            ///< yarn
  double attention_factor = 0;     ///< yarn, longrope: given in the object
  bool has_attention_factor = false;
  std::vector<float> short_factor; ///< longrope, rotaryDim/2 values
  std::vector<float> long_factor;  ///< longrope, rotaryDim/2 values
  double low_freq_factor = 1;      ///< llama3
  double high_freq_factor = 4;     ///< llama3
  double theta = 0;                ///< rope_theta inside the object: overrides the base param
  bool has_theta = false;
};

/// rope: x [T, heads*headDim], row t at position offset + t (leading dimensions fold into rows).
struct rope_params final : op_params {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;      ///< resolved: rotaryDim, or headDim when omitted
  bool interleaved = false;         ///< pairs (2i, 2i+1) instead of (i, i + rotaryDim/2)
  double offset = 0;                ///< bindable: absolute position of row 0
  double base = 10000;              ///< bindable: rope_theta (scaling.rope_theta wins when given)
  double attention_factor = 1;      ///< bindable: multiplies cos and sin when given
  bool has_attention_factor = false;
  std::vector<float> inv_freq;      ///< explicit invFreq (rotaryDim/2 values), empty if not given
  rope_scaling scaling;
};

/// Fills inv_freq[0 .. rotary_dim/2) and returns the factor on cos and sin, for a call whose
/// rows cover positions up to seq_len - 1 (dynamic and longrope depend on it).
double rope_frequencies(const rope_params& p, std::int64_t seq_len, float* inv_freq);

}  // namespace mpakt::ops
