#pragma once
/// The `mpakt` subcommands. Each takes the arguments after its name and returns the exit code.

#include <string>
#include <vector>

namespace mpakt::app {

int cmd_ops(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_graph(const std::vector<std::string>& args);
int cmd_demo(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_host(const std::vector<std::string>& args);
int cmd_admin(const std::vector<std::string>& args);
int cmd_worker(const std::vector<std::string>& args);
int cmd_top(const std::vector<std::string>& args);

}  // namespace mpakt::app
