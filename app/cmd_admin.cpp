// `mpakt admin`: an operator's commands on the accounts store of a data directory. Safe to run
// while `mpakt serve` uses the same directory: SQLite's locking serialises the writes.

#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "actors/accounts/accounts_store.hpp"
#include "app/commands.hpp"

namespace mpakt::app {

namespace {

const char* admin_usage =
    "usage: mpakt admin COMMAND [ARG] --data-dir DIR\n"
    "\n"
    "Manages the accounts in DIR/accounts.sqlite3 (the server's --data-dir).\n"
    "\n"
    "commands:\n"
    "  list                  accounts with their status, and each account's API keys\n"
    "                        (id, label, created, last used, active)\n"
    "  approve NAME          approve a pending sign-up so it can log in and create keys\n"
    "  revoke NAME           revoke an account and all its API keys\n"
    "  revoke-key KEY_ID     revoke one API key (k_…, as `list` shows it)\n"
    "  grant-admin NAME      let NAME's keys call the /api/admin routes\n"
    "  revoke-admin NAME     take that back\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "mpakt admin: %s\n\n%s", message.c_str(), admin_usage);
  return 2;
}

int fail(const error& e) {
  std::fprintf(stderr, "mpakt admin: %s\n", e.message.c_str());
  return 1;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int print_list(accounts::accounts_store& store) {
  auto accounts = store.list();
  if (!accounts) return fail(accounts.err());
  if (accounts->empty()) {
    std::printf("no accounts\n");
    return 0;
  }
  std::printf("%-24s %-9s %-6s %s\n", "ACCOUNT", "STATUS", "ADMIN", "CREATED");
  for (const auto& a : *accounts) {
    std::printf("%-24s %-9s %-6s %s\n", a.username.c_str(), a.status.c_str(), a.admin ? "yes" : "no",
                a.created_at.c_str());
    auto keys = store.keys_of(a.username);
    if (!keys) return fail(keys.err());
    for (const auto& k : *keys) {
      // Labels are checked on creation to hold no control characters, so printing is safe.
      std::printf("    key %s  label \"%s\"  created %s  last used %s  %s\n", k.key_id.c_str(),
                  k.label.c_str(), k.created_at.c_str(),
                  k.last_used_at.empty() ? "never" : k.last_used_at.c_str(), k.state.c_str());
    }
  }
  return 0;
}

}  // namespace

int cmd_admin(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::fputs(admin_usage, stdout);
    return 0;
  }
  std::string data_dir;
  std::vector<std::string> positional;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--data-dir") {
      if (i + 1 >= args.size()) return usage_error("--data-dir needs a directory");
      data_dir = args[++i];
    } else if (a.rfind("--data-dir=", 0) == 0) {
      data_dir = a.substr(11);
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("unknown option " + a);
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty()) return usage_error("give a command");
  const std::string command = positional[0];
  const bool takes_arg = command == "approve" || command == "revoke" || command == "revoke-key" ||
                         command == "grant-admin" || command == "revoke-admin";
  if (!takes_arg && command != "list") return usage_error("unknown command \"" + command + "\"");
  if (takes_arg && positional.size() != 2)
    return usage_error(command + " takes one argument, " +
                       (command == "revoke-key" ? std::string("KEY_ID") : std::string("NAME")));
  if (!takes_arg && positional.size() != 1) return usage_error("list takes no argument");
  if (data_dir.empty()) return usage_error("give --data-dir DIR");

  // Refuse to create a database in a mistyped directory; the server creates it.
  if (!is_dir(data_dir)) return fail(invalid("no directory " + data_dir));
  const std::string path = data_dir + "/" + accounts::accounts_file_name;
  if (!is_file(path))
    return fail(invalid("no accounts database at " + path + "; is --data-dir the server's data directory?"));
  auto store = accounts::accounts_store::open(path);
  if (!store) return fail(store.err());

  if (command == "list") return print_list(**store);
  const std::string& arg = positional[1];
  status st;
  const char* done = "";
  if (command == "approve") { st = (*store)->approve(arg); done = "approved account"; }
  else if (command == "revoke") { st = (*store)->revoke(arg); done = "revoked account and all its keys:"; }
  else if (command == "revoke-key") { st = (*store)->revoke_key(arg); done = "revoked key"; }
  else if (command == "grant-admin") { st = (*store)->set_admin(arg, true); done = "granted admin to"; }
  else { st = (*store)->set_admin(arg, false); done = "withdrew admin from"; }
  if (!st) return fail(st.err());
  std::printf("%s %s\n", done, arg.c_str());
  return 0;
}

}  // namespace mpakt::app
