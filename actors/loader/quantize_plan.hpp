#pragma once
/// Resident sizes and the quantize plan for a load (QNT-01..16, LOAD-24..33, Z-18..21).
///
/// Every byte figure is resident bytes: what a tensor occupies on a worker (decisions.md
/// "Units"; MB = 10^6 bytes). For each selected tensor the plan picks what a worker holds:
///
///  published  | none            | q8                      | q4
///  -----------+-----------------+-------------------------+-------------------------------
///  bf16/f16/f32 matrix          | as published | q8 (34 B / 32 values) | q4 (20 B / 32); q8 for
///             |                 |                         | embeddings, output head, value
///             |                 |                         | and down projections (QNT-05)
///  bf16/f16/f32 other (kept)    | as published in every mode (QNT-07)
///  f64/int64/bool (buffers)     | f32, 4 bytes/element, in every mode (LOAD-27)
///
/// A "matrix" (classify_weight) is a tensor published as f32, bf16 or f16 with rank >= 2 whose
/// last dimension (its row width, the axis quantization blocks run along) is a multiple of 32
/// and that has at least small_tensor_elements elements; 3-D MoE expert stacks count (rows are
/// the last dimension). Kept as published, whatever the mode:
///  - norms: a dot-separated name component containing "norm", or equal to "ln", or of the
///    form "ln_*", "*_ln", "ln<digits>" (input_layernorm, q_norm, ln_f, ln_1, ln2, …);
///  - biases: a name whose last component is "bias";
///  - small tensors: fewer than 32 × 32 = 1024 elements (one block row per row of a 32-wide
///    matrix; anything smaller saves too little to be worth an approximation);
///  - rank 0/1 tensors and rows not a multiple of 32 wide (conv kernels [C,1,K] included).
/// q8 floor under q4 ("sensitive"), by name component: embeddings (any component containing
/// "embed", or wte, wpe, shared, emb), the output head (lm_head, embed_out, output_layer, or
/// a top-level "output.weight"), value projections (v_proj, value, v, wv, to_v, v_lin and the
/// fused projections that contain one: qkv_proj, query_key_value, c_attn, wqkv, qkv, w_pack,
/// kv_b_proj), and down projections (down_proj, fc2, dense_4h_to_h, w2, ffn_down,
/// linear_fc2, and c_proj / fc_out under "mlp", wo under "densereludense"). A tied embedding
/// is one tensor and stays q8.
///
/// Pools with older workers (LOAD-26, QNT-12/13): `widen_factor` 2 doubles the resident bytes of
/// bf16/f16 tensors (a worker that predates packed weights widens them to f32), and when not
/// every worker can quantize, capacity is planned at the unquantized size.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/loader/inspect.hpp"
#include "runtime/dtype.hpp"

namespace mpakt::loader {

/// Fewer elements than this and a tensor is left as published (Z-18 "small tensors").
inline constexpr std::int64_t small_tensor_elements = quant_block * quant_block;

enum class quantize_mode { none, q8, q4, automatic };

/// "none", "q8", "q4", "auto".
std::string_view quantize_mode_name(quantize_mode m);
std::optional<quantize_mode> quantize_mode_from_name(std::string_view name);

/// How the quantize rules see a tensor.
enum class weight_kind {
  buffer,       ///< published as f64/int64/bool (or anything not f32/bf16/f16): held as f32
  kept,         ///< float, but a norm, bias, vector, small tensor or ragged rows: as published
  matrix,       ///< quantized to the mode's type
  sensitive,    ///< a matrix that stays q8 under q4 (embedding, head, value, down)
};

weight_kind classify_weight(const st_entry& e);

/// The dtype a worker that can pack and quantize holds for `e` under `mode` (none, q8 or q4),
/// or nullopt for a dtype that cannot be held at all (quantised formats; see selection.hpp).
std::optional<dtype> planned_dtype(const st_entry& e, quantize_mode mode);

/// The pool as the coordinator sees it when a load starts.
struct pool_capacity {
  std::uint64_t free_bytes = 0;          ///< free across all connected workers
  std::uint64_t largest_free_bytes = 0;  ///< the most any one worker has free
  int workers = 0;
  int widen_factor = 1;                  ///< limits.widenFactor for bf16/f16 (1 or 2)
  bool can_quantize = true;              ///< every connected worker can quantize
};

struct tensor_plan {
  std::size_t tensor = 0;              ///< index into model_index::tensors
  dtype resident = dtype::f32;         ///< what a capable worker is asked to hold
  std::uint64_t published_bytes = 0;   ///< what travels
  std::uint64_t resident_bytes = 0;    ///< size at `resident`
  std::uint64_t planned_bytes = 0;     ///< what capacity counts: the most any worker of the pool needs
};

struct load_plan {
  quantize_mode mode = quantize_mode::none;  ///< none, q8 or q4 (auto resolved)
  std::vector<tensor_plan> tensors;          ///< in selection order
  std::uint64_t published_bytes = 0;
  std::uint64_t resident_bytes = 0;
  std::uint64_t planned_bytes = 0;
};

/// The plan for one concrete mode (none, q8 or q4), with no capacity check.
load_plan plan_mode(const model_index& index, const std::vector<std::size_t>& selected, quantize_mode mode,
                    const pool_capacity& pool);

/// Checks a plan against the pool: the total, then each tensor against the largest worker.
/// errc::unavailable (503) with capacity_message / tensor_capacity_message.
status check_capacity(const model_index& index, const load_plan& plan, const pool_capacity& pool);

/// Plans a load: `auto` takes the least aggressive of none, q8, q4 that passes check_capacity
/// (QNT-06); when none does, the error is q4's (the smallest the load could be, Z-19).
result<load_plan> plan_load(const model_index& index, const std::vector<std::size_t>& selected, quantize_mode mode,
                            const pool_capacity& pool);

/// Bytes in MB (10^6) rounded up / down.
std::uint64_t mb_up(std::uint64_t bytes);
std::uint64_t mb_down(std::uint64_t bytes);

/// `model needs N MB but only F MB is free across W worker(s) — load fewer layers or wait for
/// more volunteers` (LOAD-31). N is rounded up and F down, so the message never shows N <= F.
std::string capacity_message(std::uint64_t need_bytes, std::uint64_t free_bytes, int workers);
/// `tensor <name> needs N MB but the largest worker has F MB free` (LOAD-21, Z-20).
std::string tensor_capacity_message(std::string_view name, std::uint64_t need_bytes, std::uint64_t largest_free_bytes);

}  // namespace mpakt::loader
