#pragma once
/// Config-driven decoder builder: config.json of any supported family → v3 graphs.
///
/// `parse_arch_config` reads a transformers config.json (5.x keys, with the 4.x keys still
/// found on the Hub) into an `arch_config`: the family's structure written out as plain
/// data — which norm, which block shape, how q/k/v are laid out in the file, rope per
/// layer, windows, MLP or MoE per layer, and every tensor name as a template. The graph
/// writer (`arch_graph`) then knows no family names at all; it only follows that data.
/// Anything a config asks for that the builder cannot reproduce exactly is refused at
/// parse time with a message naming the config field; nothing is approximated.
///
/// The graphs are v3 JSON text, exactly what a client would send, so they go through the
/// same parser and validator as any request.
///
/// Session tensors (allocated by `arch_cache_graph`, updated in place by every pass):
///   "k<L>", "v<L>"  KV cache of attention layer L: [cache_rows, kvHeads*headDim] and
///                   [cache_rows, kvHeads*vHeadDim] (MLA caches the expanded per-head K/V)
///   "conv<L>"       short-conv state of layer L (LFM2): [K-1, hidden]. Unlike a KV cache
///                   it is not indexed by position, so a pass that later turns out to be
///                   rejected (a speculative draft) cannot be undone: see
///                   `arch_config::recurrent_state`.
///   "hist"          token history [cache_rows, 1] when repetition penalties are used.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.hpp"
#include "runtime/status.hpp"

namespace mpakt::models {

/// A norm's tensors; `weight` empty means the norm is absent, `bias` empty means no bias.
struct arch_norm_names {
  std::string weight;
  std::string bias;
};

/// A projection's tensors. `in_out` marks GPT-2's Conv1D, stored [in, out] rather than
/// nn.Linear's [out, in].
struct arch_linear_names {
  std::string weight;
  std::string bias;
  bool in_out = false;
};

/// Tensor names, as templates: "{L}" is the layer index, "{E}" the expert, "{H}" the head.
struct arch_weight_names {
  std::string embed;                 ///< [V, C]
  std::string pos_embed;             ///< learned positions [P, C] (GPT-2), or empty
  arch_norm_names embed_norm;        ///< LayerNorm right after the embedding (BLOOM)
  arch_norm_names final_norm;
  arch_linear_names lm_head;         ///< weight empty = tied to `embed`
  // per layer
  arch_norm_names attn_norm;         ///< before the mixer (and the MLP in one-norm parallel blocks)
  arch_norm_names mlp_norm;          ///< before the MLP; empty in one-norm parallel blocks
  arch_norm_names post_attn_norm;    ///< sandwich norms (Gemma 2/3) on the mixer output
  arch_norm_names post_mlp_norm;     ///< sandwich norms on the MLP output
  arch_linear_names q, k, v, o;      ///< separate projections (q/k/v empty when fused)
  arch_linear_names qkv;             ///< fused q/k/v projection, split per `qkv_layout`
  std::string q_norm, k_norm;        ///< q/k norm weights ({H} for one tensor per head)
  arch_linear_names gate, up, down;  ///< dense MLP (gate empty for an ungated MLP)
  arch_linear_names gate_up;         ///< fused [gate | up] rows (Phi-3, GLM)
  std::string router;                ///< MoE router [E, C]
  std::string router_bias;           ///< DeepSeek-V3 e_score_correction_bias [E]
  std::string expert_gate, expert_up, expert_down;  ///< per expert, with {E}
  arch_linear_names shared_gate, shared_up, shared_down;  ///< shared expert (Qwen2-MoE, DeepSeek)
  std::string shared_expert_gate;    ///< Qwen2-MoE: sigmoid(x·wᵀ) scales the shared expert
  std::string q_a, q_a_norm, q_b;    ///< MLA query LoRA (q_a empty: plain `q` projection)
  std::string kv_a, kv_a_norm, kv_b; ///< MLA compressed kv
  std::string conv_in, conv_kernel, conv_out;  ///< LFM2 short conv
};

enum class arch_norm_kind : std::uint8_t {
  rms,    ///< RMSNorm (rmsnorm op; `norm_weight_offset` 1 for Gemma)
  layer,  ///< LayerNorm, mean-subtracting (layernorm op; zeros beta when bias-free)
};

enum class arch_block_kind : std::uint8_t {
  sequential,  ///< x += mixer(norm x); x += mlp(norm x)
  parallel,    ///< x += mixer(attn_norm x) + mlp(mlp_norm x, or the same normed x)
};

/// How a fused qkv projection's output columns are arranged.
enum class arch_qkv_layout : std::uint8_t {
  separate,  ///< q_proj, k_proj, v_proj
  blocked,   ///< [all q | all k | all v] (Phi-3, MPT, GPT-2, Falcon-7B multi-query)
  per_head,  ///< [q|k|v] per head (GPT-NeoX, BLOOM, Falcon without multi-query)
  grouped,   ///< per kv group [q … q | k | v] (Falcon new_decoder_architecture)
  codegen,   ///< `qkv_blocks` blocks, each [q | v | k] (CodeGen's model-parallel layout)
};

enum class arch_qk_norm_kind : std::uint8_t {
  none,
  rms_head,    ///< RMSNorm per head, one shared [hd] weight (Qwen3, Gemma 3, LFM2)
  rms_full,    ///< RMSNorm over the whole projection width (OLMoE)
  layer_head,  ///< bias-free LayerNorm per head, a weight row per head (StableLM, Cohere)
};

/// The MLP's activation: silu, tanh GELU (gelu_new, gelu_pytorch_tanh, gelu_fast), exact GELU
/// (gelu, gelu_python), quick GELU x·sigmoid(1.702x) (quick_gelu) and relu. MoE experts take
/// only the first two (the moe op's activations).
enum class arch_activation : std::uint8_t { silu, gelu_tanh, gelu_exact, gelu_quick, relu };

enum class arch_mixer_kind : std::uint8_t {
  attention,   ///< q/k/v projections, grouped-query attention
  mla,         ///< DeepSeek multi-head latent attention
  short_conv,  ///< LFM2 gated short convolution
};

/// Rotary settings of one layer.
struct arch_rope {
  bool enabled = true;
  double theta = 10000;
  int rotary_dim = 0;          ///< channels rotated per head (≤ the roped head width)
  bool interleaved = false;
  std::string scaling_json;    ///< the rope op's `scaling` object, or empty
};

/// One decoder layer.
struct arch_layer {
  arch_mixer_kind mixer = arch_mixer_kind::attention;
  int window = 0;              ///< sliding window (keys seen, current included); 0 = full
  arch_rope rope;
  bool moe = false;            ///< MoE feed-forward instead of the dense MLP
  double attn_scale = 0;       ///< attention scale; 0 = 1/sqrt(headDim)
};

/// Routing of a sparse MoE feed-forward (the moe op's params).
struct arch_moe {
  int experts = 0;
  int top_k = 0;
  bool sigmoid_scoring = false;
  bool normalize = false;
  double scale = 1;
  int n_group = 1;
  int topk_group = 1;
  int group_top_k = 1;
  bool shared = false;         ///< a shared expert (SwiGLU on the same input) is added
  bool shared_gated = false;   ///< …scaled by sigmoid(x·shared_expert_gateᵀ) (Qwen2-MoE)
};

/// MLA dimensions (DeepSeek-V2/V3).
struct arch_mla {
  int q_lora_rank = 0;         ///< 0: q comes from a plain q_proj
  int kv_lora_rank = 0;
  int nope_dim = 0;
  int rope_dim = 0;
  int v_dim = 0;
  double latent_eps = 1e-6;    ///< q_a_layernorm / kv_a_layernorm are built with the default eps
};

/// Everything the graph writer needs, normalised from config.json.
struct arch_config {
  std::string family;          ///< config model_type
  int hidden = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;            ///< q/k head width (MLA: nope + rope)
  int v_head_dim = 0;          ///< value head width (= head_dim except MLA)
  int vocab = 0;
  int intermediate = 0;        ///< dense MLP width
  int moe_intermediate = 0;
  arch_norm_kind norm = arch_norm_kind::rms;
  double norm_eps = 1e-6;
  double norm_weight_offset = 0;  ///< Gemma: the stored weight is relative to 1
  arch_block_kind block = arch_block_kind::sequential;
  arch_qkv_layout qkv_layout = arch_qkv_layout::separate;
  int qkv_blocks = 1;          ///< codegen layout: mp_num
  arch_qk_norm_kind qk_norm = arch_qk_norm_kind::none;
  bool qk_norm_offset = false; ///< q/k norms are Gemma-style (1 + w)
  arch_activation activation = arch_activation::silu;
  bool gated_mlp = true;       ///< down(act(gate)·up) rather than down(act(up))
  double embed_scale = 1;      ///< multiplies the embeddings (Gemma √C rounded to the dtype, Granite)
  double residual_scale = 1;   ///< multiplies each branch before its residual add (Granite)
  double logit_scale = 1;      ///< multiplies the logits (Cohere; 1/logits_scaling for Granite)
  double final_softcap = 0;    ///< softcap on the logits (Gemma 2); 0 = none
  double attn_softcap = 0;     ///< softcap on attention scores (Gemma 2); 0 = none
  bool alibi = false;          ///< BLOOM/MPT ALiBi (slopes as BLOOM; MPT's with max 8 are equal)
  bool tied_embeddings = false;
  int conv_kernel = 0;         ///< LFM2 conv_L_cache (K)
  int max_positions = 0;       ///< hard position limit (learned positions), 0 = none
  /// A session holds state that a pass advances irreversibly (LFM2 conv states): a verify
  /// pass whose drafts are rejected would leave it wrong, so speculative decoding must not
  /// be used with such a model without a state snapshot.
  bool recurrent_state = false;
  /// longrope: transformers re-prefills once the sequence first passes this many positions
  /// (Phi-3); a session that crosses it must be re-prefilled by the caller. 0 = n/a.
  int rope_regime_limit = 0;
  /// Dynamic NTK rope: past max_position_embeddings the frequencies follow each pass's length,
  /// so a verify pass of several tokens is not that many one-token steps (generate refuses such
  /// verify graphs; chat does not speculate on these models).
  bool rope_follows_length = false;
  arch_moe moe;
  arch_mla mla;
  std::vector<arch_layer> layer;
  arch_weight_names names;
};

/// Parses config.json. A model_type or setting it cannot map exactly is refused naming the
/// field, e.g. "config.json model_type 'xyz' is not a family mpakt builds".
result<arch_config> parse_arch_config(std::string_view config_json);

/// What one pass feeds and returns.
struct arch_graph_options {
  std::string model_id;        ///< the {model} of every weight input
  int tokens = 1;              ///< T rows fed in this pass
  /// Read and update the session tensors of arch_cache_graph (names in the file comment).
  bool use_cache = false;
  int cache_rows = 0;
  /// Compiled template: ids are a bound input "ids" and positions a {"$bind": "pos"}.
  bool compiled = false;
  int pos = 0;                 ///< first position (when not compiled)
  std::vector<int> ids;        ///< token ids (when not compiled)
  /// Output: "logits" [T, vocab] or "tok" (argmax of every row).
  bool argmax = false;
  /// Only the last fed row reaches the final norm and the head: one logits row or one token
  /// (a prefill that needs only what comes next — the head is the widest product of a model).
  bool last_only = false;
  /// Output "tok" from a sample step instead (temperature etc. set per call by generate).
  bool sample = false;
  /// With use_cache: keep the fed ids in the session's "hist" and let one sample step per
  /// row penalise repeats over positions 0..pos+row (repetitionPenalty; 1 keeps the history
  /// without penalising). 0 = no history.
  double repetition_penalty = 0;
};

/// The v3 graph object (JSON text) for one pass.
std::string arch_graph(const arch_config& c, const arch_graph_options& o);

/// A graph allocating, with zeros, every session tensor the passes use (KV caches per
/// attention layer, conv states, and "hist" when `history`), and retaining them. A `kv` of
/// bf16 or f16 allocates the KV caches at half width through zeros' server-only `dtype`
/// parameter (the graph must then be built with build_options::server_params); conv states
/// and the history stay f32. The pass graphs are the same for every cache width.
std::string arch_cache_graph(const arch_config& c, int cache_rows, bool history = false, dtype kv = dtype::f32);

}  // namespace mpakt::models
