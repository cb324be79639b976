// The embedded op schema (schemas/ops.json): its structure equals the spec's ops.json, the
// /api/ops document and opsHash are stable, and the registry check catches an op in the
// schema without an implementation and the reverse (checklist VER-12…24).

#include "runtime/schema.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "runtime/registry_check.hpp"
#include "test/support/files.hpp"

namespace mpakt {
namespace {

TEST(Schema, RegistryMatchesTheEmbeddedSchema) {
  const auto problems = check_registry();
  for (const auto& p : problems) ADD_FAILURE() << p;
  EXPECT_EQ(schema::instance().ops().size(), 37u);
}

TEST(Schema, StructureEqualsTheSpecOpsJson) {
  rapidjson::Document spec, ours;
  spec.Parse(test::read_file(std::string(MPAKT_SHARED_DIR) + "/spec/ops.json").c_str());
  ours.Parse(std::string(embedded_ops_json()).c_str());
  ASSERT_FALSE(spec.HasParseError());
  ASSERT_FALSE(ours.HasParseError());
  ASSERT_EQ(spec["ops"].Size(), ours["ops"].Size());
  EXPECT_EQ(ours["protocolVersion"].GetInt(), 3);
  EXPECT_EQ(ours["conventions"].Size(), 5u);
  for (rapidjson::SizeType i = 0; i < spec["ops"].Size(); ++i) {
    const auto& a = spec["ops"][i];
    const auto& b = ours["ops"][i];
    const std::string op = a["op"].GetString();
    EXPECT_EQ(op, std::string(b["op"].GetString()));
    EXPECT_EQ(a["minInputs"].GetInt(), b["minInputs"].GetInt()) << op;
    EXPECT_EQ(a["maxInputs"].GetInt(), b["maxInputs"].GetInt()) << op;
    EXPECT_EQ(std::string(a["addedIn"].GetString()), std::string(b["addedIn"].GetString())) << op;
    EXPECT_EQ(a["core"].GetBool(), b["core"].GetBool()) << op;
    EXPECT_EQ(a.HasMember("mutatesInput"), b.HasMember("mutatesInput")) << op;
    EXPECT_EQ(a.HasMember("writesInput"), b.HasMember("writesInput")) << op;
    ASSERT_EQ(a["params"].MemberCount(), b["params"].MemberCount()) << op;
    for (auto pa = a["params"].MemberBegin(), pb = b["params"].MemberBegin(); pa != a["params"].MemberEnd(); ++pa, ++pb) {
      EXPECT_EQ(std::string(pa->name.GetString()), std::string(pb->name.GetString())) << op;
      EXPECT_EQ(std::string(pa->value["type"].GetString()), std::string(pb->value["type"].GetString())) << op;
    }
    ASSERT_EQ(a["features"].Size(), b["features"].Size()) << op;
    for (rapidjson::SizeType f = 0; f < a["features"].Size(); ++f)
      EXPECT_EQ(std::string(a["features"][f].GetString()), std::string(b["features"][f].GetString())) << op;
  }
  EXPECT_EQ(spec["features"].MemberCount(), ours["features"].MemberCount());
}

TEST(Schema, OpsDocumentCarriesAStableHash) {
  const auto& sc = schema::instance();
  rapidjson::Document doc;
  doc.Parse(sc.ops_document().c_str());
  ASSERT_FALSE(doc.HasParseError());
  const std::string hash = doc["opsHash"].GetString();
  EXPECT_EQ(hash.size(), 16u);
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(hash, sc.ops_hash());
  EXPECT_EQ(doc["protocolVersion"].GetInt(), 3);
  EXPECT_EQ(doc["ops"].Size(), 37u);
  // The same schema parsed again hashes the same; a changed parameter type changes it.
  auto again = schema::parse(embedded_ops_json());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ops_hash(), hash);
  std::string changed(embedded_ops_json());
  const auto at = changed.find("\"number?\"");
  ASSERT_NE(at, std::string::npos);
  changed.replace(at, 9, "\"string?\"");
  auto other = schema::parse(changed);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->ops_hash(), hash);
}

/// The embedded schema with op `drop` removed and/or an op `extra` added.
std::string edited_schema(const char* drop, bool add_extra) {
  rapidjson::Document d;
  d.Parse(std::string(embedded_ops_json()).c_str());
  auto& ops = d["ops"];
  for (auto it = ops.Begin(); it != ops.End(); ++it)
    if (drop && std::string((*it)["op"].GetString()) == drop) {
      ops.Erase(it);
      break;
    }
  if (add_extra) {
    rapidjson::Value extra;
    extra.CopyFrom(ops[0], d.GetAllocator());
    extra["op"].SetString("frobnicate", d.GetAllocator());
    ops.PushBack(extra, d.GetAllocator());
  }
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  d.Accept(w);
  return b.GetString();
}

bool mentions(const std::vector<std::string>& problems, const std::string& text) {
  for (const auto& p : problems)
    if (p.find(text) != std::string::npos) return true;
  return false;
}

TEST(Schema, RegistryCheckCatchesMissingAndStrayOps) {
  auto without = schema::parse(edited_schema("rope", false));
  ASSERT_TRUE(without.ok());
  const auto a = check_registry(*without);
  EXPECT_TRUE(mentions(a, "op_def rope is not in the schema")) << (a.empty() ? "" : a[0]);
  EXPECT_TRUE(mentions(a, "CPU kernel for rope is not in the schema"));

  auto with_extra = schema::parse(edited_schema(nullptr, true));
  ASSERT_TRUE(with_extra.ok());
  const auto b = check_registry(*with_extra);
  EXPECT_TRUE(mentions(b, "op frobnicate is in the schema but has no op_def"));
  EXPECT_TRUE(mentions(b, "op frobnicate has no reference CPU kernel"));
}

TEST(Schema, BrokenDocumentsAreRefused) {
  EXPECT_FALSE(schema::parse("[]").ok());
  EXPECT_FALSE(schema::parse("{\"ops\": [{\"op\": \"x\"}]}").ok());
  EXPECT_FALSE(schema::parse("{\"ops\": [{\"op\": \"x\", \"minInputs\": 1, \"maxInputs\": 1, \"params\": {\"p\": {\"type\": \"weird\"}}}]}").ok());
}

}  // namespace
}  // namespace mpakt
