#pragma once
/// Identifiers the API hands out: a prefix (m_ model, t_ tensor, s_ session, gt_ compiled
/// graph, k_ key) and 24 hex digits from the OS's random source, so ids are unguessable and
/// another account cannot probe them.

#include <string>
#include <string_view>

namespace mpakt {

std::string new_id(std::string_view prefix);

/// Bytes from the OS's random source (getrandom); used for ids, keys, salts and seeds.
void os_random(void* out, std::size_t n);

}  // namespace mpakt
