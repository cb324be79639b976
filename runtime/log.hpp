#pragma once
/// The server's log: one line per event on stderr, as text or as one JSON object per line
/// (`mpakt serve --log-format json|text`; docs/operators.md, "Metrics and logs").
///
/// Text lines read "mpakt serve: <message> key=value ..." (or the program set_program names); JSON lines are
/// {"ts":"<UTC ISO 8601, ms>","level":"info","component":"…","msg":"…", <fields>}. A field
/// `request_id` ties a line to the HTTP request it served (x-request-id).
///
/// Thread-safety: `line` may be called from any thread; each line is written with one
/// write(2)-sized fputs under a mutex, so lines never interleave. The format is set once at
/// start (before threads log).

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace mpakt::log {

enum class format { text, json };

/// Sets the format of every later line (text until called).
void set_format(format f);
format current_format();
/// The program a text line names ("mpakt serve" until set; `mpakt worker` sets its own). Set
/// once at start, before threads log.
void set_program(std::string_view name);

/// One field of a line: a name and its value, written as a JSON string (or key=value in text;
/// values with spaces are quoted there).
using field = std::pair<std::string_view, std::string>;

/// Writes one line: `level` is "info", "warn" or "error"; `component` names the part of the
/// server ("http", "gate", "coordinator", ...).
void line(std::string_view level, std::string_view component, std::string_view message,
          std::initializer_list<field> fields = {});

/// The JSON form of one line, without the newline (line() writes it; tests read it).
std::string json_line(std::string_view level, std::string_view component, std::string_view message,
                      std::initializer_list<field> fields);

}  // namespace mpakt::log
