/// Fast CPU kernel for attention: f32 online softmax in vectors (attention_impl.inc, one
/// translation unit per level), with the work split over the kernel threads.
///
/// A row's keys are cut into chunks at fixed positions (attention_impl.inc), each giving a
/// partial softmax folded in chunk order. Many query rows (prefill, verify): the (kv head,
/// row) pairs are dealt round-robin to the threads, so the long rows at the end of a causal
/// prefill spread evenly. Few rows (decode): each (chunk, slice of the kv heads) runs on its
/// own, the cache read in row order, and the partials are folded after — flash-decoding — so
/// a long context keeps every thread busy; over one chunk of keys whose kv heads do not divide
/// among the threads, the rows kernel shares the query heads out evenly instead.
/// Either way a row gets the same bits, whatever the pass or the thread count: a verify pass
/// or a batched step decides exactly as a one-token step would.
///
/// Claims attention with f32 inputs — k and v may both be bf16 or both f16 (KV caches at
/// half width, widened in registers) — whose head widths are multiples of 16 (at most 256
/// for q/k and 512 for v); the reference kernel covers the rest. Agrees with the reference
/// (which accumulates in double) to f32 rounding.

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/fast/families.hpp"
#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/interrupt.hpp"
#include "runtime/ops/attention_params.hpp"

namespace mpakt::cpu_fast {

namespace {

/// One level's attention functions.
struct level_fns {
  std::int64_t (*chunks)(const attention_args&);
  void (*rows)(const attention_args&, std::int64_t, std::int64_t, int, int, int);
  void (*partials)(const attention_args&, std::int64_t, std::int64_t, int, int, std::int64_t, std::int64_t,
                   const attention_partial*);
  void (*fold)(const attention_args&, std::int64_t, std::int64_t, int, const attention_partial&);
};

constexpr level_fns avx2_fns{avx2::attention_chunks, avx2::attention_rows, avx2::attention_partials, avx2::attention_fold};
constexpr level_fns avx512_fns{avx512::attention_chunks, avx512::attention_rows, avx512::attention_partials,
                               avx512::attention_fold};

/// Passes of at most this many rows split a row's keys over the threads (chunk by chunk);
/// longer ones split their rows.
constexpr std::int64_t few_rows = 8;

/// Rows of a pass one job of many rows takes per kv head: enough for the kernel to take the
/// heads of up to four rows of a kv head through the keys together (attention_rows).
constexpr std::int64_t rows_together = 4;

/// Below this many multiply-adds the caller runs everything alone.
constexpr double parallel_min_work = 1 << 15;

/// One step's arguments; `slope_slot` is the scratch slot its ALiBi slopes may take.
result<attention_args> args_of(const kernel_call& call, int slope_slot) {
  const auto& p = params_of<ops::attention_params>(call);
  const tensor& q = *call.inputs[0];
  const tensor& k = *call.inputs[1];
  const tensor& v = *call.inputs[2];
  const tensor* bias = call.inputs.size() > 3 ? call.inputs[3] : nullptr;
  tensor& out = *call.output;

  // k and v: f32, or a bf16/f16 cache (the dtype read from the tensors: a compiled
  // template serves caches of every width)
  if (k.type() != v.type())
    return invalid("inputs k and v are " + std::string(dtype_name(k.type())) + " and " + std::string(dtype_name(v.type())) +
                   "; a cache's keys and values share one dtype");
  attention_args a;
  switch (k.type()) {
    case dtype::f32: a.kv = attention_args::kv_type::f32; break;
    case dtype::bf16: a.kv = attention_args::kv_type::bf16; break;
    case dtype::f16: a.kv = attention_args::kv_type::f16; break;
    default: return invalid("input k is " + std::string(dtype_name(k.type())) + "; attention reads f32, bf16 or f16 keys");
  }
  a.q = q.f32();
  a.k = k.data();
  a.v = v.data();
  a.out = out.f32();
  a.q_stride = q.cols();
  a.k_stride = k.cols();
  a.v_stride = v.cols();
  a.out_stride = out.cols();
  a.rows = q.rows();
  a.keys = k.rows();
  a.heads = int(p.heads);
  a.kv_heads = int(p.kv_heads);
  a.head_dim = int(p.head_dim);
  a.v_head_dim = int(p.v_head_dim);
  a.pos_offset = std::int64_t(p.pos_offset);
  a.causal = p.causal;
  a.window = p.has_window ? std::int64_t(p.window) : 0;
  a.scale = float(p.score_scale());
  a.softcap = p.has_softcap ? float(p.softcap) : 0.0f;
  if (p.alibi != ops::attention_params::alibi_kind::none) {
    float* slopes = call.scratch->floats(std::size_t(p.heads), slope_slot);
    ops::alibi_slopes(p, slopes);
    a.slopes = slopes;
  }
  if (bias) {
    a.bias = bias->f32();
    a.bias_head_stride = bias->shape().size() == 3 ? a.rows * a.keys : 0;
  }
  return a;
}

/// The last key a pass's rows can see, plus one.
std::int64_t last_key_of(const attention_args& a) {
  return std::min(a.keys, a.causal && a.window == 0 ? a.pos_offset + a.rows : a.keys);
}

/// Multiply-adds of a pass (what decides whether it is worth the threads).
double work_of(const attention_args& a) {
  return double(a.rows) * a.heads * double(std::max<std::int64_t>(last_key_of(a), 1)) * (a.head_dim + a.v_head_dim);
}

template <const level_fns& F>
status attention_kernel(const kernel_call& call) {
  auto args = args_of(call, 0);
  if (!args) return args.err();
  const attention_args& a = *args;
  if (a.rows == 0) return ok_status();

  const int group = a.heads / a.kv_heads;
  const std::int64_t last_key = last_key_of(a);
  const double work = work_of(a);
  const int threads = kernel_threads();
  const bool alone = threads <= 1 || work < parallel_min_work;
  const std::int64_t used_chunks = (last_key + attention_chunk - 1) / attention_chunk;
  // A few rows over one chunk of keys read the cache in row order (attention_partials) when
  // their kv heads divide among the threads; else (three kv heads on two threads) the rows
  // kernel shares the query heads out evenly.
  const bool by_rows =
      a.rows > few_rows || used_chunks == 0 || (used_chunks == 1 && !alone && a.kv_heads % threads != 0);
  if (by_rows) {
    if (alone) {
      // rows in runs of 64, between which a stopped run ends the kernel (runtime/interrupt.hpp);
      // a row's bits do not depend on the rows beside it
      const interrupt stop = current_interrupt();
      for (int g = 0; g < a.kv_heads; ++g)
        for (std::int64_t r = 0; r < a.rows; r += 64) {
          if (stop.requested()) return ok_status();
          F.rows(a, r, std::min<std::int64_t>(a.rows, r + 64), g, 0, group);
        }
      return ok_status();
    }
    // many rows: (kv head, run of rows_together rows) pairs dealt round-robin, so causal rows
    // of every length spread (a run lets the kernel take two rows' heads of a small group
    // through the keys together)
    const std::int64_t runs = (a.rows + rows_together - 1) / rows_together;
    const std::int64_t pairs = std::int64_t(a.kv_heads) * runs;
    if (a.rows <= few_rows && pairs % threads != 0 && group > 1) {
      // A few rows whose kv heads do not divide among the threads (a decode step of three kv
      // heads on two): each thread takes an equal share of the query heads instead, in (run,
      // kv head, head) order, so a kv head may be split between two threads (its keys then
      // read twice, the second time mostly from the shared cache). A head's bits do not
      // depend on which heads run beside it.
      const std::int64_t units = runs * a.heads;
      parallel_for(threads, [&](int part) {
        for (std::int64_t u = units * part / threads, end = units * (part + 1) / threads; u < end;) {
          const std::int64_t r = u / a.heads * rows_together;
          const int g = int(u % a.heads) / group, hg = int(u % a.heads) % group;
          const int hg_end = int(std::min<std::int64_t>(group, hg + (end - u)));
          F.rows(a, r, std::min(a.rows, r + rows_together), g, hg, hg_end);
          u += hg_end - hg;
        }
      });
      return ok_status();
    }
    const int parts = int(std::min<std::int64_t>(pairs, 8 * threads));
    parallel_for(parts, [&](int part) {
      for (std::int64_t i = part; i < pairs; i += parts) {
        const std::int64_t r = i / a.kv_heads * rows_together;
        F.rows(a, r, std::min(a.rows, r + rows_together), int(i % a.kv_heads), 0, group);
      }
    });
    return ok_status();
  }
  // Few rows (decode, a verify pass): each chunk on its own — for every kv head, or for a
  // slice of them when the chunks are too few to keep the threads busy — folded per kv head
  // after. A job reads whole cache rows, so its keys and values stream in order.
  const std::int64_t chunks = F.chunks(a);
  const std::int64_t per_g = a.rows * group * chunks;
  float* ml = call.scratch->floats(std::size_t(2 * a.kv_heads * per_g), 1);
  float* acc = call.scratch->floats(std::size_t(a.kv_heads * per_g * a.v_head_dim), 2);
  // (kept from call to call: no allocation; the helpers reach it through this reference, as a
  // lambda names a thread_local rather than capturing it)
  thread_local std::vector<attention_partial> kept_parts;
  std::vector<attention_partial>& parts = kept_parts;
  parts.resize(std::size_t(a.kv_heads));
  for (int g = 0; g < a.kv_heads; ++g)
    parts[std::size_t(g)] = {ml + g * per_g, ml + (a.kv_heads + g) * per_g, acc + g * per_g * a.v_head_dim};
  const std::int64_t slices = attention_slices(alone ? 1 : threads, used_chunks, a.kv_heads);
  const std::int64_t jobs = used_chunks * slices;
  auto job = [&](int j) {
    const std::int64_t c = j / slices, s = j % slices;
    const int g0 = int(a.kv_heads * s / slices), g1 = int(a.kv_heads * (s + 1) / slices);
    // (the chunks past the pass's keys are left unwritten: the fold reads only a row's own)
    F.partials(a, 0, a.rows, g0, g1, c, c + 1, parts.data());
  };
  if (alone) {
    // chunk by chunk, between which a stopped run ends the kernel (runtime/interrupt.hpp)
    const interrupt stop = current_interrupt();
    for (int j = 0; j < int(jobs); ++j) {
      if (stop.requested()) return ok_status();
      job(j);
    }
  } else {
    parallel_for(int(jobs), job);
  }
  for (int g = 0; g < a.kv_heads; ++g) F.fold(a, 0, a.rows, g, parts[std::size_t(g)]);
  return ok_status();
}

/// Consecutive attention steps that read none of each other's outputs — the sessions'
/// steps of one layer in a batched pass — as one job list for the threads: each few-row
/// step's chunks of keys, in slices of its kv heads read in row order, become jobs beside
/// the others', so a layer costs one pass of the threads instead of one per session, and
/// three kv heads no longer leave one of two threads waiting. Each step runs the same
/// functions over the same chunks, folded in the same order, as attention_kernel: the same
/// bits. A step of many rows runs through attention_kernel as it comes.
template <const level_fns& F>
status attention_group(std::span<const kernel_call> calls) {
  struct planned {
    attention_args a;
    std::int64_t chunks = 0, used = 0;  ///< chunks of its keys; those its rows see
    std::int64_t slices = 1;            ///< slices of its kv heads a chunk's jobs take
    std::size_t parts = 0;              ///< its first entry in `parts` (partial steps)
    int first_job = 0, jobs = 0;
    bool partial = false;               ///< by chunks, folded after
  };
  thread_local std::vector<planned> kept_plan;
  thread_local std::vector<attention_partial> kept_parts;
  std::vector<planned>& plan = kept_plan;
  std::vector<attention_partial>& parts = kept_parts;
  plan.clear();
  parts.clear();
  int jobs = 0;
  double work = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    // scratch slots 0–2 are attention_kernel's; a grouped step takes three of its own
    const int slot = 3 + 3 * int(i);
    auto args = args_of(calls[i], slot);
    if (!args) return args.err();
    if (args->rows == 0) continue;
    if (args->rows > few_rows) {
      MPAKT_TRY(attention_kernel<F>(calls[i]));
      continue;
    }
    planned p;
    p.a = *args;
    p.used = (last_key_of(p.a) + attention_chunk - 1) / attention_chunk;
    if (p.used >= 1) {
      // by chunks in row order (a step over one chunk too: its cache rows read in turn)
      p.partial = true;
      p.chunks = F.chunks(p.a);
      const std::int64_t per_g = p.a.rows * (p.a.heads / p.a.kv_heads) * p.chunks;
      float* ml = calls[i].scratch->floats(std::size_t(2 * p.a.kv_heads * per_g), slot + 1);
      float* acc = calls[i].scratch->floats(std::size_t(p.a.kv_heads * per_g * p.a.v_head_dim), slot + 2);
      p.parts = parts.size();
      for (int g = 0; g < p.a.kv_heads; ++g)
        parts.push_back({ml + g * per_g, ml + (p.a.kv_heads + g) * per_g, acc + g * per_g * p.a.v_head_dim});
    }
    work += work_of(p.a);
    plan.push_back(p);
  }
  // Jobs: (chunk, slice of kv heads) of each step, sliced as one pass over all the group's
  // chunks would be (attention_slices) — the group's steps alone mostly are enough (a batched
  // pass's eight steps over one chunk each: each step's kv heads together, its rows read whole).
  std::int64_t used_all = 0;
  for (const planned& p : plan) used_all += p.used;
  for (planned& p : plan) {
    p.first_job = jobs;
    if (!p.partial) {
      p.jobs = p.a.kv_heads;  // (no key visible: a kv head's rows, finished in place)
    } else {
      p.slices = attention_slices(kernel_threads(), used_all, p.a.kv_heads);
      p.jobs = int(p.used * p.slices);
    }
    jobs += p.jobs;
  }
  auto job = [&](int j) {
    std::size_t i = 0;
    while (j >= plan[i].first_job + plan[i].jobs) ++i;
    const planned& p = plan[i];
    const int l = j - p.first_job;
    if (!p.partial) return F.rows(p.a, 0, p.a.rows, l, 0, p.a.heads / p.a.kv_heads);
    const std::int64_t c = l / p.slices, sl = l % p.slices;
    const int g0 = int(p.a.kv_heads * sl / p.slices), g1 = int(p.a.kv_heads * (sl + 1) / p.slices);
    F.partials(p.a, 0, p.a.rows, g0, g1, c, c + 1, parts.data() + p.parts);
  };
  if (kernel_threads() <= 1 || work < parallel_min_work) {
    // job by job, between which a stopped run ends the kernel (runtime/interrupt.hpp)
    const interrupt stop = current_interrupt();
    for (int j = 0; j < jobs; ++j) {
      if (stop.requested()) return ok_status();
      job(j);
    }
  } else {
    parallel_for(jobs, job);
  }
  for (const planned& p : plan)
    if (p.partial)
      for (int g = 0; g < p.a.kv_heads; ++g) F.fold(p.a, 0, p.a.rows, g, parts[p.parts + std::size_t(g)]);
  return ok_status();
}

bool accepts_attention(std::span<const tensor_desc> inputs, const op_params& params) {
  const auto& p = static_cast<const ops::attention_params&>(params);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const bool half_ok = (i == 1 || i == 2) && (inputs[i].type == dtype::bf16 || inputs[i].type == dtype::f16);
    if (inputs[i].type != dtype::f32 && !half_ok) return false;
  }
  if (inputs[1].type != inputs[2].type) return false;
  return p.head_dim % 16 == 0 && p.v_head_dim % 16 == 0 && p.head_dim > 0 && p.head_dim <= 256 && p.v_head_dim > 0 &&
         p.v_head_dim <= 512;
}

}  // namespace

void add_attention_kernels(std::vector<cpu_kernel>& out) {
  using cpu_isa::level;
  out.push_back({"attention", attention_kernel<avx512_fns>, accepts_attention, "avx512", level::avx512,
                 attention_group<avx512_fns>, false});
  out.push_back({"attention", attention_kernel<avx2_fns>, accepts_attention, "avx2", level::avx2,
                 attention_group<avx2_fns>, false});
}

}  // namespace mpakt::cpu_fast
