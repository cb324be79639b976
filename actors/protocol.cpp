#include "actors/protocol.hpp"

#include <set>
#include <string_view>

#include "runtime/dtype.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

void add_protocol_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<worker_status>("worker_status");
  cfg.add_message_type<tensor_begin_request>("tensor_begin_request");
  cfg.add_message_type<tensor_piece>("tensor_piece");
  cfg.add_message_type<tensor_piece_ref>("tensor_piece_ref");
  cfg.add_message_type<tensor_fetch_part>("tensor_fetch_part");
  cfg.add_message_type<std::vector<tensor_fetch_part>>("std::vector<tensor_fetch_part>");
  cfg.add_message_type<std::vector<tensor_begin_request>>("std::vector<tensor_begin_request>");
  cfg.add_message_type<tensor_fetch>("tensor_fetch");
  cfg.add_message_type<tensor_fetch_reply>("tensor_fetch_reply");
  cfg.add_message_type<run_request>("run_request");
  cfg.add_message_type<run_reply>("run_reply");
  cfg.add_message_type<compile_request>("compile_request");
  cfg.add_message_type<compile_reply>("compile_reply");
  cfg.add_message_type<tensor_info>("tensor_info");
  cfg.add_message_type<session_info>("session_info");
  cfg.add_message_type<tensor_upload>("tensor_upload");
  cfg.add_message_type<tensor_blob>("tensor_blob");
  cfg.add_message_type<session_dump>("session_dump");
  cfg.add_message_type<gen_token>("gen_token");
  cfg.add_message_type<gen_done>("gen_done");
  cfg.add_message_type<gen_request>("gen_request");
  cfg.add_message_type<gen_plan>("gen_plan");
  cfg.add_message_type<gen_journal>("gen_journal");
  cfg.add_message_type<std::vector<std::vector<std::string>>>("std::vector<std::vector<std::string>>");
  cfg.add_message_type<std::vector<std::int32_t>>("std::vector<std::int32_t>");
  cfg.add_message_type<std::vector<graph_actor>>("std::vector<graph_actor>");

  cfg.add_message_type<gen_listener>("gen_listener");
  cfg.add_message_type<std::vector<std::pair<std::string, double>>>("std::vector<std::pair<std::string,double>>");
  cfg.add_message_type<std::vector<std::int64_t>>("std::vector<std::int64_t>");
  cfg.add_message_type<std::vector<tensor_info>>("std::vector<tensor_info>");
  cfg.add_message_type<std::vector<worker_status>>("std::vector<worker_status>");
  cfg.add_message_type<std::vector<worker_actor>>("std::vector<worker_actor>");
  cfg.add_message_type<caller>("caller");
  cfg.add_message_type<graph_call>("graph_call");
  cfg.add_message_type<compile_call>("compile_call");
  cfg.add_message_type<tensor_call>("tensor_call");
  cfg.add_message_type<load_call>("load_call");
  cfg.add_message_type<session_call>("session_call");
  cfg.add_message_type<generate_call>("generate_call");
  // replies to the HTTP edge (actors/replies.hpp)
  cfg.add_message_type<versions_reply>("versions_reply");
  cfg.add_message_type<status_reply>("status_reply");
  cfg.add_message_type<recheck_reply>("recheck_reply");
  cfg.add_message_type<deleted_reply>("deleted_reply");
  cfg.add_message_type<inspect_model_reply>("inspect_model_reply");
  cfg.add_message_type<load_model_reply>("load_model_reply");
  cfg.add_message_type<list_models_reply>("list_models_reply");
  cfg.add_message_type<open_session_reply>("open_session_reply");
  cfg.add_message_type<session_state_reply>("session_state_reply");
  cfg.add_message_type<checkpoint_reply>("checkpoint_reply");
  cfg.add_message_type<compile_graph_reply>("compile_graph_reply");
  cfg.add_message_type<list_graphs_reply>("list_graphs_reply");
  cfg.add_message_type<upload_tensor_reply>("upload_tensor_reply");
  cfg.add_message_type<account_reply>("account_reply");
  cfg.add_message_type<login_reply>("login_reply");
  cfg.add_message_type<key_reply>("key_reply");
  cfg.add_message_type<keys_reply>("keys_reply");
  cfg.add_message_type<worker_actor>("worker_actor");
  cfg.add_message_type<actor_snapshot>("actor_snapshot");
  cfg.add_message_type<std::vector<actor_snapshot>>("std::vector<actor_snapshot>");
  cfg.add_message_type<grid_event>("grid_event");
  cfg.add_message_type<describable>("describable");
  cfg.add_message_type<grid_listener>("grid_listener");
  cfg.add_message_type<std::vector<std::pair<std::string, std::string>>>("std::vector<std::pair<std::string,std::string>>");
}

std::string malformed_copy(const session_dump& d) {
  std::set<std::string_view> names;
  for (const auto& t : d.tensors) {
    const auto type = dtype_from_name(t.dtype);
    if (!type) return "its tensor " + t.name + " has an unknown dtype";
    const std::int64_t n = shape_numel(t.shape);
    const auto bytes = n < 0 ? std::nullopt : storage_bytes(*type, n);
    if (!bytes || (is_quantized(*type) && (t.shape.empty() || t.shape.back() % quant_block != 0)))
      return "its tensor " + t.name + " has an invalid shape";
    if (*bytes != t.bytes.size())
      return "its tensor " + t.name + " carries " + std::to_string(t.bytes.size()) + " bytes for a shape of " +
             std::to_string(*bytes);
    if (!names.insert(t.name).second) return "it holds tensor " + t.name + " twice";
  }
  return {};
}

}  // namespace mpakt
