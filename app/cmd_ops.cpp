#include <cstdio>

#include "app/commands.hpp"
#include "runtime/schema.hpp"

namespace mpakt::app {

int cmd_ops(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "usage: mpakt ops\n");
    return 2;
  }
  const std::string& doc = schema::instance().ops_document();
  std::fwrite(doc.data(), 1, doc.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace mpakt::app
