// `mpakt admin`: an operator's commands on the accounts store of a data directory. Safe to run
// while `mpakt serve` uses the same directory: SQLite's locking serialises the writes.

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "actors/accounts/accounts_store.hpp"
#include "app/commands.hpp"
#include "app/sizes.hpp"

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
    "  revoke-admin NAME     take that back\n"
    "\n"
    "volunteers (`mpakt worker --join HOST:PORT --token TOKEN`):\n"
    "  volunteer-token NAME [--memory-cap SIZE] [--expires DAYS]\n"
    "                        a join token for the volunteer NAME, printed once (a new one\n"
    "                        replaces NAME's old token); the pool uses at most SIZE of its\n"
    "                        memory (e.g. 8G); DAYS may be a fraction (default: never expires)\n"
    "  volunteer-tokens      every volunteer token: name, state, cap, created, expires\n"
    "  revoke-volunteer NAME revoke NAME's token: a running coordinator disconnects the\n"
    "                        volunteer within seconds and restores its sessions elsewhere\n";

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

int print_volunteers(accounts::accounts_store& store) {
  auto tokens = store.volunteer_tokens();
  if (!tokens) return fail(tokens.err());
  if (tokens->empty()) {
    std::printf("no volunteer tokens\n");
    return 0;
  }
  std::printf("%-24s %-8s %-14s %-21s %s\n", "VOLUNTEER", "STATE", "MEMORY CAP", "CREATED", "EXPIRES");
  for (const auto& t : *tokens)
    std::printf("%-24s %-8s %-14s %-21s %s\n", t.name.c_str(), t.state.c_str(),
                t.memory_cap ? std::to_string(t.memory_cap).c_str() : "-", t.created_at.c_str(),
                t.expires_at.empty() ? "never" : t.expires_at.c_str());
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
  std::uint64_t memory_cap = 0;
  double expires_days = 0;
  bool token_options = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--data-dir") {
      if (i + 1 >= args.size()) return usage_error("--data-dir needs a directory");
      data_dir = args[++i];
    } else if (a.rfind("--data-dir=", 0) == 0) {
      data_dir = a.substr(11);
    } else if (a == "--memory-cap") {
      auto size = i + 1 < args.size() ? parse_size(args[++i]) : std::nullopt;
      if (!size || *size == 0) return usage_error("--memory-cap takes a size such as 8G or 512M");
      memory_cap = *size;
      token_options = true;
    } else if (a == "--expires") {
      char* end = nullptr;
      const std::string v = i + 1 < args.size() ? args[++i] : "";
      expires_days = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(expires_days > 0)) return usage_error("--expires takes a number of days above 0");
      token_options = true;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("unknown option " + a);
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty()) return usage_error("give a command");
  const std::string command = positional[0];
  const bool takes_arg = command == "approve" || command == "revoke" || command == "revoke-key" ||
                         command == "grant-admin" || command == "revoke-admin" || command == "volunteer-token" ||
                         command == "revoke-volunteer";
  if (!takes_arg && command != "list" && command != "volunteer-tokens")
    return usage_error("unknown command \"" + command + "\"");
  if (takes_arg && positional.size() != 2)
    return usage_error(command + " takes one argument, " +
                       (command == "revoke-key" ? std::string("KEY_ID") : std::string("NAME")));
  if (!takes_arg && positional.size() != 1) return usage_error(command + " takes no argument");
  if (token_options && command != "volunteer-token") return usage_error("--memory-cap and --expires belong to volunteer-token");
  if (data_dir.empty()) return usage_error("give --data-dir DIR");

  // Refuse to create a database in a mistyped directory; the server creates it.
  if (!is_dir(data_dir)) return fail(invalid("no directory " + data_dir));
  const std::string path = data_dir + "/" + accounts::accounts_file_name;
  if (!is_file(path))
    return fail(invalid("no accounts database at " + path + "; is --data-dir the server's data directory?"));
  auto store = accounts::accounts_store::open(path);
  if (!store) return fail(store.err());

  if (command == "list") return print_list(**store);
  if (command == "volunteer-tokens") return print_volunteers(**store);
  const std::string& arg = positional[1];
  if (command == "volunteer-token") {
    auto t = (*store)->create_volunteer_token(arg, memory_cap, expires_days);
    if (!t) return fail(t.err());
    // the token alone on stdout's first line, for scripts; shown this once
    std::printf("%s\n", t->token.c_str());
    std::fprintf(stderr, "volunteer token for %s (memory cap %s, expires %s); it is not shown again\n", arg.c_str(),
                 memory_cap ? std::to_string(memory_cap).c_str() : "none", t->expires_at.empty() ? "never" : t->expires_at.c_str());
    return 0;
  }
  status st;
  const char* done = "";
  if (command == "approve") { st = (*store)->approve(arg); done = "approved account"; }
  else if (command == "revoke") { st = (*store)->revoke(arg); done = "revoked account and all its keys:"; }
  else if (command == "revoke-key") { st = (*store)->revoke_key(arg); done = "revoked key"; }
  else if (command == "revoke-volunteer") { st = (*store)->revoke_volunteer(arg); done = "revoked the volunteer token of"; }
  else if (command == "grant-admin") { st = (*store)->set_admin(arg, true); done = "granted admin to"; }
  else { st = (*store)->set_admin(arg, false); done = "withdrew admin from"; }
  if (!st) return fail(st.err());
  std::printf("%s %s\n", done, arg.c_str());
  return 0;
}

}  // namespace mpakt::app
