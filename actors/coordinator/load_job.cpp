#include "actors/coordinator/load_job.hpp"


#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <type_traits>

#include "actors/errors.hpp"
#include "actors/ids.hpp"
#include "actors/loader/fetch.hpp"
#include "actors/loader/files.hpp"
#include "actors/loader/inspect.hpp"
#include "actors/loader/quantize_plan.hpp"
#include "actors/loader/reader.hpp"
#include "actors/loader/selection.hpp"
#include "actors/loader/source.hpp"
#include "actors/loader/stream.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"
#include "runtime/stages.hpp"
#include "runtime/tensor_builder.hpp"

namespace mpakt {

namespace {

using clock_type = std::chrono::steady_clock;

struct job_context {
  loader::model_source source;
  std::unique_ptr<loader::byte_reader> reader;
  /// Another reader of the same kind: each fetch thread of a load has its own.
  std::function<std::unique_ptr<loader::byte_reader>()> make_reader;
  loader::model_index index;
};

/// The parsed source and a reader for it, without reading anything yet. `token` (the
/// caller's, else the grid's) goes to the hub with hub sources only.
result<job_context> reach_source(const load_job_config& cfg, const std::string& text, const std::string& token) {
  loader::source_options so;
  so.hf_endpoint = cfg.hf_endpoint;
  so.local_dirs = cfg.local_dirs;
  auto src = loader::parse_source(text, so);
  if (!src) return std::move(src).err();
  job_context ctx;
  ctx.source = std::move(*src);
  if (ctx.source.remote()) {
    loader::http_reader_options ho;
    ho.verify_tls = cfg.verify_tls;
    ho.allow_private = cfg.allow_private_sources;
    ho.trusted_endpoint = cfg.hf_endpoint;
    if (ctx.source.kind == loader::source_kind::hub) ho.token = token.empty() ? cfg.hf_token : token;
    ctx.make_reader = [ho] { return loader::make_http_reader(ho); };
  } else {
    ctx.make_reader = [dirs = cfg.local_dirs] { return loader::make_local_reader(dirs); };
  }
  ctx.reader = ctx.make_reader();
  return ctx;
}

result<job_context> open_source(const load_job_config& cfg, const std::string& text, const std::string& token) {
  auto reached = reach_source(cfg, text, token);
  if (!reached) return reached;
  job_context ctx = std::move(*reached);
  auto idx = loader::inspect_source(ctx.source, *ctx.reader);
  if (!idx) return std::move(idx).err();
  ctx.index = std::move(*idx);
  return ctx;
}

/// Asks `h` and waits for the answer (of types Rs...) on this, the job's own, thread.
template <class... Rs, class Handle, class... Ts>
result<std::tuple<Rs...>> ask(caf::scoped_actor& self, const Handle& h, std::chrono::milliseconds timeout, Ts&&... xs) {
  result<std::tuple<Rs...>> out = error{errc::internal, "no reply"};
  self->request(h, timeout, std::forward<Ts>(xs)...)
      .receive([&](Rs&... ys) { out = std::tuple<Rs...>(std::move(ys)...); },
               [&](caf::error& e) { out = from_caf(e); });
  return out;
}

/// Waits for the answer (of type R) to a request already sent, as a byte count: a `tbegin`'s
/// bool counts as 0. Answers are taken oldest first, the order they arrive in.
template <class R, class Handle>
std::function<result<std::uint64_t>()> answer_of(Handle h) {
  return [h]() mutable -> result<std::uint64_t> {
    result<std::uint64_t> r = error{errc::internal, "no reply"};
    h.receive(
        [&](R& x) {
          if constexpr (std::is_same_v<R, bool>) r = std::uint64_t(0);
          else r = std::uint64_t(x);
        },
        [&](caf::error& e) { r = from_caf(e); });
    return r;
  };
}

/// A load's capacity check (LOAD-30: before anything is transferred, against the pool's free
/// memory now) and placement: the plan, the outcome's placement fields, and each planned
/// tensor's worker.
result<std::tuple<loader::load_plan, load_outcome, std::vector<worker_actor>>> place_load(
    caf::scoped_actor& self, const load_job_config& cfg, const pool_actor& pool, const load_job_request& req, const job_context& ctx,
    const std::vector<std::size_t>& selected, loader::quantize_mode mode) {
  // The pool as it is now, and the plan checked against it.
  auto workers = ask<std::vector<worker_status>>(self, pool, cfg.worker_timeout, workers_atom::value);
  if (!workers) return std::move(workers).err();
  const auto& statuses = std::get<0>(*workers);
  loader::pool_capacity cap;
  cap.workers = int(statuses.size());
  for (const auto& w : statuses) {
    cap.free_bytes += w.free_bytes;
    cap.largest_free_bytes = std::max(cap.largest_free_bytes, w.free_bytes);
    if (!w.packed_weights) cap.widen_factor = 2;
    if (!w.can_quantize) cap.can_quantize = false;
  }
  if (statuses.empty()) return error{errc::unavailable, "no worker is connected — wait for volunteers"};
  auto plan = loader::plan_load(ctx.index, selected, mode, cap);
  if (!plan) return std::move(plan).err();

  // Placement: the worker with the most free memory holds the whole selection; when none can,
  // it is spread over several, layer by layer (runtime/stages.hpp).
  load_outcome out;
  out.source = req.source;
  out.quantize = std::string(loader::quantize_mode_name(plan->mode));
  std::vector<worker_actor> part_of;  // per planned tensor
  auto picked = ask<worker_actor, worker_status>(self, pool, cfg.worker_timeout, pick_atom::value, plan->planned_bytes);
  if (picked) {
    out.worker = std::get<0>(*picked);
    out.worker_id = std::get<1>(*picked).worker_id;
    part_of.assign(plan->tensors.size(), out.worker);
  } else {
    const std::string too_big = "model needs " + std::to_string(loader::mb_up(plan->planned_bytes)) +
                                " MB but no single worker has that much free (the largest has " +
                                std::to_string(loader::mb_down(cap.largest_free_bytes)) + " MB)";
    if (!req.allow_spread) return error{errc::unavailable, too_big};
    auto members = ask<std::vector<worker_actor>, std::vector<worker_status>>(self, pool, cfg.worker_timeout, members_atom::value);
    if (!members) return std::move(members).err();
    const auto& [ws, ss] = *members;
    if (ws.size() < 2) return error{errc::unavailable, too_big};
    std::vector<spread_tensor> ts;
    for (const auto& tp : plan->tensors) ts.push_back({ctx.index.tensors[tp.tensor].entry.name, tp.planned_bytes});
    std::vector<std::uint64_t> free;
    for (const auto& st : ss) free.push_back(st.free_bytes);
    auto where = plan_spread(ts, free);
    if (!where) return error{errc::unavailable, too_big + ", and " + where.err().message};
    std::map<int, std::size_t> part_index;  // worker index -> part
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const int w = (*where)[i];
      auto [it, fresh] = part_index.emplace(w, out.part_workers.size());
      if (fresh) {
        out.part_workers.push_back(ws[std::size_t(w)]);
        out.part_ids.push_back(ss[std::size_t(w)].worker_id);
        out.part_tensors.emplace_back();
        out.part_bytes.push_back(0);
      }
      out.part_tensors[it->second].push_back(ts[i].name);
      part_of.push_back(ws[std::size_t(w)]);
    }
    out.worker = out.part_workers.front();
    out.worker_id = out.part_ids.front();
  }
  return std::tuple{std::move(*plan), std::move(out), std::move(part_of)};
}

result<load_outcome> run_load(caf::actor_system& sys, const load_job_config& cfg, const pool_actor& pool,
                              const load_job_request& req, load_progress& progress) {
  const auto t0 = clock_type::now();
  auto ctx = open_source(cfg, req.source, req.token);
  if (!ctx) return std::move(ctx).err();
  loader::selection_request sel{req.include, req.exclude, req.names};
  auto selected = loader::select_tensors(ctx->index, sel);
  if (!selected) return std::move(selected).err();
  MPAKT_TRY(loader::check_not_quantised(ctx->index, *selected));
  const std::string mode_name = req.quantize.empty() ? cfg.default_quantize : req.quantize;
  auto mode = loader::quantize_mode_from_name(mode_name);
  if (!mode) return invalid("quantize must be one of none, q8, q4, auto, not \"" + mode_name + "\"");

  caf::scoped_actor self{sys};
  // The capacity check and the placement, then the room reserved on each worker chosen. Two
  // loads checked against the same free memory cannot both keep it: the second finds its
  // reservation refused and checks again, now seeing the first's (and is refused there, with
  // the capacity numbers, before anything is transferred).
  std::optional<loader::load_plan> plan;
  load_outcome out;
  std::vector<worker_actor> part_of;  // per planned tensor
  std::vector<worker_actor> reserved_on;
  auto release = [&] {
    for (const auto& w : reserved_on)
      self->request(w, cfg.worker_timeout, reserve_atom::value, req.model_id, std::uint64_t(0)).receive([](bool) {}, [](caf::error&) {});
    reserved_on.clear();
  };
  constexpr int attempts = 3;
  for (int attempt = 1;; ++attempt) {
    auto placed = place_load(self, cfg, pool, req, *ctx, *selected, *mode);
    if (!placed) {
      // The capacity check reads the pool's free memory, the pick reads it again: a load that
      // reserved its room in between leaves the check passed and no worker to pick. Looking
      // again sees that reservation, and the check itself refuses, with the numbers.
      if (attempt < attempts && placed.err().code == errc::unavailable) continue;
      return std::move(placed).err();
    }
    auto& [p, o, parts] = *placed;
    // What each chosen worker must hold for this load.
    std::vector<std::pair<worker_actor, std::uint64_t>> need;
    for (std::size_t k = 0; k < p.tensors.size(); ++k) {
      auto it = std::find_if(need.begin(), need.end(), [&](const auto& n) { return n.first == parts[k]; });
      if (it == need.end()) need.emplace_back(parts[k], p.tensors[k].planned_bytes);
      else it->second += p.tensors[k].planned_bytes;
    }
    std::optional<error> refused;
    for (const auto& [w, bytes] : need) {
      auto r = ask<bool>(self, w, cfg.worker_timeout, reserve_atom::value, req.model_id, bytes);
      if (!r) {
        refused = std::move(r).err();
        break;
      }
      reserved_on.push_back(w);
    }
    if (!refused) {
      plan = std::move(p);
      out = std::move(o);
      part_of = std::move(parts);
      break;
    }
    release();
    if (attempt == attempts) return *refused;
  }
  std::uint64_t transferred = 0, resident = 0;
  {
    std::uint64_t total = 0;
    for (const auto& tp : plan->tensors) total += tp.published_bytes;
    progress.published_total = total;
    progress.tensors_total = std::uint32_t(plan->tensors.size());
    progress.workers = std::uint32_t(std::max<std::size_t>(1, out.part_workers.size()));
    progress.phase = 1;
  }
  auto tell_workers_to_drop = [&] {
    // Sent after everything in flight (messages between two actors keep their order), so
    // the workers drop whatever of this model they received, whatever state it was in.
    std::vector<worker_actor> touched = out.part_workers;
    if (touched.empty()) touched.push_back(out.worker);
    for (const auto& w : touched)
      self->request(w, cfg.worker_timeout, tabort_atom::value, req.model_id).receive([](bool) {}, [](caf::error&) {});
  };
  auto abort_load = [&](error e) -> error {
    tell_workers_to_drop();
    release();
    return e;
  };

  // Fetch units (several range requests in flight), each tensor's pieces sent to its worker
  // as they arrive without waiting for each acknowledgement: the worker converts one piece
  // while the next is on its way. The pool bounds what the coordinator holds — fetched,
  // or sent and not yet acknowledged — to a few pieces.
  std::vector<loader::tensor_location> where;
  for (const auto& tp : plan->tensors) where.push_back(loader::locate(ctx->index, ctx->index.tensors[tp.tensor]));
  // Workers that read their own bytes from the model host: whoever proves it reads the same
  // file there (its header's digest) gets ranges instead of pieces — of every tensor, or
  // (its answer) only of tensors it keeps as published; any other worker — a spot-checked
  // volunteer, one that may not or cannot reach the host — gets the bytes through here as
  // before. A hub token is never handed on, so such loads relay.
  std::map<std::pair<caf::actor_addr, std::string>, bool> fetching_itself;  // (worker, file) -> converted ones too
  const bool token_sent = ctx->source.kind == loader::source_kind::hub && !(req.token.empty() && cfg.hf_token.empty());
  if (cfg.worker_fetch && ctx->source.remote() && !token_sent) {
    std::set<std::pair<caf::actor_addr, std::string>> asked;
    std::set<caf::actor_addr> refused;  // (one refusal or failure is enough: its other files relay too)
    for (std::size_t k = 0; k < plan->tensors.size(); ++k) {
      const auto& file = ctx->index.files[ctx->index.tensors[plan->tensors[k].tensor].file];
      const auto who = part_of[k].address();
      if (file.header_sha256.empty() || refused.count(who) || !asked.emplace(who, file.location).second) continue;
      auto r = ask<bool>(self, part_of[k], cfg.worker_timeout, tprobe_atom::value, file.location, file.data_start,
                         file.header_sha256);
      if (r) {
        fetching_itself.emplace(std::pair{who, file.location}, std::get<0>(*r));
        continue;
      }
      refused.insert(who);
      if (r.err().code != errc::invalid)  // (invalid: it does not, by what it is or by its rules)
        log::line("info", "load", "model " + req.model_id + ": a worker reads " + file.location +
                                      " through the coordinator: " + r.err().message);
    }
  }
  // A range a worker reads itself that still fails after its own retries (the host stopped
  // answering it, the route between them broke) does not fail the load: every request in
  // flight is answered, the workers drop what they hold of the model, and the load starts
  // again with every byte relayed through here (docs/decisions.md, "Loading").
  std::uint64_t peak_held = 0;
  for (bool relay_all = false;; relay_all = true) {
    auto units = loader::plan_fetches(where);
    if (!relay_all)
      for (auto& u : units)
        u.remote = !u.segments.empty() && std::all_of(u.segments.begin(), u.segments.end(), [&](const auto& seg) {
          auto it = fetching_itself.find({part_of[seg.tensor].address(), u.location});
          if (it == fetching_itself.end()) return false;
          const auto& tp = plan->tensors[seg.tensor];
          return it->second || tensor_builder::keeps_as_published(ctx->index.tensors[tp.tensor].entry.file_dtype, tp.resident);
        });
    transferred = resident = 0;
    out.tensor_ids.clear();
    for (auto& b : out.part_bytes) b = 0;
    progress.transferred = progress.resident = 0;
    progress.tensors_done = 0;
    bool range_failed = false;
    loader::fetch_pool fetcher(where, std::move(units), ctx->make_reader,
                               {cfg.fetch_connections, std::uint64_t(cfg.pieces_held) * loader::piece_bytes});

    // Requests sent and not yet answered, oldest first; answers come back in this order.
    struct in_flight {
      enum class kind { begin, piece, end, range } what;
      std::size_t tensor;      ///< index into plan->tensors
      std::uint64_t bytes = 0; ///< a piece's or range's bytes
      std::function<result<std::uint64_t>()> answer;  ///< waits for it (not for a range)
      /// A range its worker reads itself: waits for it; `ends` are the tensors it ends.
      std::function<result<tensor_fetch_reply>()> range_answer;
      std::vector<std::size_t> ends;
    };
    std::deque<in_flight> flying;
    // Takes the oldest answer.
    auto ended = [&](std::size_t k, std::uint64_t bytes) {
      const worker_actor& worker = part_of[k];
      resident += bytes;
      for (std::size_t p = 0; p < out.part_workers.size(); ++p)
        if (out.part_workers[p] == worker) out.part_bytes[p] += bytes;
      out.tensor_ids.emplace_back(new_id("t_"), ctx->index.tensors[plan->tensors[k].tensor].entry.name);
      progress.resident = resident;
      progress.tensors_done = std::uint32_t(out.tensor_ids.size());
    };
    auto settle = [&]() -> status {
      in_flight f = std::move(flying.front());
      flying.pop_front();
      if (f.what == in_flight::kind::range) {
        auto r = f.range_answer();
        if (!r) {
          range_failed = true;
          return std::move(r).err();
        }
        if (r->bytes != f.bytes || r->resident.size() != f.ends.size())
          return make_error(errc::internal, "a worker answered a range of " + std::to_string(f.bytes) + " bytes ending " +
                                                std::to_string(f.ends.size()) + " tensors with " + std::to_string(r->bytes) +
                                                " bytes and " + std::to_string(r->resident.size()) + " tensors");
        fetcher.release(f.bytes, true);
        transferred += f.bytes;
        progress.transferred = transferred;
        for (std::size_t i = 0; i < f.ends.size(); ++i) ended(f.ends[i], r->resident[i]);
        return ok_status();
      }
      auto r = f.answer();
      if (!r) return std::move(r).err();
      if (f.what == in_flight::kind::piece) {
        fetcher.release(f.bytes, false);
        transferred += f.bytes;
        progress.transferred = transferred;
      } else if (f.what == in_flight::kind::end) {
        ended(f.tensor, *r);
      }
      return ok_status();
    };
    auto begin_of = [&](const loader::tensor_plan& tp, const loader::tensor_info& t) {
      tensor_begin_request b;
      b.model_id = req.model_id;
      b.name = t.entry.name;
      b.file_dtype = t.entry.file_dtype;
      b.shape = t.entry.shape;
      b.resident = std::string(dtype_name(tp.resident));
      b.published_bytes = tp.published_bytes;
      return b;
    };
    auto send_all = [&]() -> status {
      for (std::size_t u = 0; u < fetcher.size(); ++u) {
        // Answers are taken while waiting for the unit, so pieces the workers finished free room
        // for the fetch threads.
        std::optional<result<loader::fetched_unit>> got;
        while (!(got = fetcher.try_next())) {
          if (flying.empty()) {
            got = fetcher.next();
            break;
          }
          if (auto st = settle(); !st) return st;
        }
        if (!*got) return got->err();
        auto& parts = (*got)->parts;
        const auto& unit = fetcher.unit(u);
        const auto& segs = unit.segments;
        if (unit.remote) {
          // Its worker reads it: one message begins the tensors starting in it, reads the range
          // in their pieces' place and ends the tensors ending with it (all on one worker).
          const worker_actor& worker = part_of[segs.front().tensor];
          tensor_fetch f{req.model_id, unit.location, unit.first, unit.length, {}, {}, {}};
          in_flight fl{in_flight::kind::range, segs.front().tensor, unit.length, {}, {}, {}};
          for (const auto& seg : segs) {
            const auto& tp = plan->tensors[seg.tensor];
            const auto& t = ctx->index.tensors[tp.tensor];
            if (seg.offset == 0) f.begins.push_back(begin_of(tp, t));
            if (seg.length > 0) f.parts.push_back({t.entry.name, seg.offset, seg.length});
            if (seg.offset + seg.length == t.bytes()) {
              f.ends.push_back(t.entry.name);
              fl.ends.push_back(seg.tensor);
            }
          }
          auto h = self->request(worker, cfg.worker_timeout, tfetch_atom::value, std::move(f));
          fl.range_answer = [h]() mutable -> result<tensor_fetch_reply> {
            result<tensor_fetch_reply> r = error{errc::internal, "no reply"};
            h.receive([&](tensor_fetch_reply& x) { r = std::move(x); }, [&](caf::error& e) { r = from_caf(e); });
            return r;
          };
          flying.push_back(std::move(fl));
          continue;
        }
        for (std::size_t s = 0; s < segs.size(); ++s) {
          const auto& seg = segs[s];
          const std::size_t k = seg.tensor;
          const auto& tp = plan->tensors[k];
          const auto& t = ctx->index.tensors[tp.tensor];
          const worker_actor& worker = part_of[k];
          if (seg.offset == 0)
            flying.push_back({in_flight::kind::begin, k, 0,
                              answer_of<bool>(self->request(worker, cfg.worker_timeout, tbegin_atom::value, begin_of(tp, t))), {}, {}});
          if (seg.length > 0) {
            tensor_piece p{req.model_id, t.entry.name, seg.offset, std::move(parts[s])};
            flying.push_back({in_flight::kind::piece, k, seg.length,
                              answer_of<std::uint64_t>(self->request(worker, cfg.worker_timeout, tpiece_atom::value, std::move(p))), {}, {}});
          }
          if (seg.offset + seg.length == t.bytes()) {
            flying.push_back({in_flight::kind::end, k, 0,
                              answer_of<std::uint64_t>(self->request(worker, cfg.worker_timeout, tend_atom::value, req.model_id, t.entry.name)), {}, {}});
          }
        }
      }
      while (!flying.empty())
        if (auto st = settle(); !st) return st;
      return ok_status();
    };
    status sent = send_all();
    if (sent) {
      peak_held = fetcher.peak_bytes();
      break;
    }
    while (!flying.empty()) (void)settle();
    if (!range_failed || relay_all) return abort_load(std::move(sent).err());
    log::line("warn", "load", "model " + req.model_id + ": a worker could not read its range from the model host (" +
                                  sent.err().message + "); loading it again through the coordinator");
    tell_workers_to_drop();
  }
  release();  // what the tensors did not draw (nothing, when the plan was exact)
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  out.published_bytes = transferred;
  out.resident_bytes = resident;
  metrics::m().load_bytes.with().inc(double(transferred));

  out.commit = ctx->reader->repo_commit();
  auto& r = out.reply;
  r.model_id = req.model_id;
  r.source = req.source;
  if (ctx->source.kind == loader::source_kind::hub) {
    r.hub = true;
    r.revision = ctx->source.revision;
    r.commit = out.commit;
  }
  for (const auto& [id, name] : out.tensor_ids) r.tensors.push_back(weight_id{name, id});
  r.bytes_transferred = transferred;
  r.throughput_mbs = std::round(transferred / 1e6 / std::max(secs, 1e-6) * 10) / 10;
  r.quantize = out.quantize;
  r.kv_dtype = req.kv_dtype.empty() ? cfg.default_kv_dtype : req.kv_dtype;
  r.resident_bytes = resident;
  // The most weight bytes the coordinator held at once — fetched, or sent to a worker and not
  // yet acknowledged: a few pieces, whatever the model's size (LOAD-19).
  r.coordinator_peak_bytes = peak_held;
  r.elapsed_ms = std::uint64_t(secs * 1000);
  // Where it went: one worker, or each worker's share of a spread model (its layers in order).
  r.spread = !out.part_workers.empty();
  if (!r.spread) r.placement.push_back(placement_view{out.worker_id, out.tensor_ids.size(), resident, {}});
  for (std::size_t p = 0; p < out.part_workers.size(); ++p)
    r.placement.push_back(
        placement_view{out.part_ids[p], out.part_tensors[p].size(), out.part_bytes[p], layer_groups(out.part_tensors[p])});
  return out;
}

}  // namespace

load_job_actor spawn_load_job(caf::actor_system& sys, load_job_config cfg, pool_actor pool,
                              std::shared_ptr<load_progress> progress) {
  if (!progress) progress = std::make_shared<load_progress>();
  return sys.spawn<caf::detached>([cfg, pool, progress](load_job_actor::pointer self) -> load_job_actor::behavior_type {
    return {
        [=](load_atom, const load_job_request& req) -> caf::result<load_outcome> {
          auto r = run_load(self->system(), cfg, pool, req, *progress);
          progress->phase = 2;
          self->quit();
          if (!r) return to_caf(r.err());
          return std::move(*r);
        },
        [=](inspect_atom, const std::string& source, const std::string& token) -> caf::result<inspect_model_reply> {
          auto ctx = open_source(cfg, source, token);
          self->quit();
          if (!ctx) return to_caf(ctx.err());
          return loader::inspect_reply_of(ctx->index);
        },
        [=](files_atom, const std::string& source, const std::string& token)
            -> caf::result<std::string, std::string, std::string, std::string> {
          self->quit();
          auto ctx = reach_source(cfg, source, token);
          if (!ctx) return to_caf(ctx.err());
          auto files = loader::read_model_files(ctx->source, *ctx->reader);
          if (!files) return to_caf(files.err());
          return caf::result<std::string, std::string, std::string, std::string>(
              std::move(files->config), std::move(files->tokenizer), std::move(files->tokenizer_config),
              std::move(files->chat_template));
        },
    };
  });
}

void add_load_job_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<load_job_request>("load_job_request");
  cfg.add_message_type<load_outcome>("load_outcome");
  cfg.add_message_type<std::vector<std::pair<std::string, std::string>>>("std::vector<std::pair<std::string,std::string>>");
}

}  // namespace mpakt
