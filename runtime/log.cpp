#include "runtime/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "runtime/utf8.hpp"

namespace mpakt::log {

namespace {

std::atomic<format> g_format{format::text};
std::string g_program = "mpakt serve: ";  ///< (set once at start, before threads log)
std::mutex g_write;

/// `s` as a JSON string body (no quotes): escapes, and bytes that are not UTF-8 as U+FFFD.
void append_json(std::string& out, std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
      ++i;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
      ++i;
    } else if (const std::size_t n = utf8_sequence_length(s, i); n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];  // (room for any int the compiler can imagine in each field)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000));
  return buf;
}

}  // namespace

void set_format(format f) { g_format.store(f); }
void set_program(std::string_view name) { g_program = std::string(name) + ": "; }
format current_format() { return g_format.load(); }

std::string json_line(std::string_view level, std::string_view component, std::string_view message,
                      std::initializer_list<field> fields) {
  std::string out = "{\"ts\":\"" + utc_now() + "\",\"level\":\"";
  append_json(out, level);
  out += "\",\"component\":\"";
  append_json(out, component);
  out += "\",\"msg\":\"";
  append_json(out, message);
  out += "\"";
  for (const auto& [name, value] : fields) {
    out += ",\"";
    append_json(out, name);
    out += "\":\"";
    append_json(out, value);
    out += "\"";
  }
  return out + "}";
}

void line(std::string_view level, std::string_view component, std::string_view message, std::initializer_list<field> fields) {
  std::string out;
  if (g_format.load() == format::json) {
    out = json_line(level, component, message, fields);
  } else {
    out = g_program;
    out.append(message);
    for (const auto& [name, value] : fields) {
      out.append(" ").append(name).append("=");
      if (value.find_first_of(" \"") == std::string::npos && !value.empty()) {
        out += value;
      } else {
        out += '"';
        append_json(out, value);
        out += '"';
      }
    }
  }
  out += '\n';
  std::lock_guard<std::mutex> lock(g_write);
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace mpakt::log
