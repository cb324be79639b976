#include "runtime/models/tokenizer_unicode.hpp"

#include <algorithm>
#include <vector>

#include "runtime/models/tokenizer_unicode_tables.hpp"

namespace mpakt::models::unicode {

namespace tables = unicode_tables;

namespace {

bool in_ranges(const tables::code_range* ranges, std::size_t size, char32_t cp) {
  const auto* end = ranges + size;
  const auto* it = std::upper_bound(ranges, end, cp, [](char32_t c, const tables::code_range& r) { return c < r.lo; });
  return it != ranges && cp <= (it - 1)->hi;
}

std::uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = tables::ccc_ranges + tables::ccc_ranges_size;
  const auto* it = std::upper_bound(tables::ccc_ranges, end, cp,
                                    [](char32_t c, const tables::ccc_range& r) { return c < r.lo; });
  return it != tables::ccc_ranges && cp <= (it - 1)->hi ? (it - 1)->ccc : 0;
}

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t hangul_s = 0xAC00, hangul_l = 0x1100, hangul_v = 0x1161, hangul_t = 0x11A7;
constexpr char32_t hangul_l_count = 19, hangul_v_count = 21, hangul_t_count = 28;
constexpr char32_t hangul_n_count = hangul_v_count * hangul_t_count;
constexpr char32_t hangul_s_count = hangul_l_count * hangul_n_count;

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= hangul_s && cp < hangul_s + hangul_s_count) {
    const char32_t s = cp - hangul_s;
    out.push_back(hangul_l + s / hangul_n_count);
    out.push_back(hangul_v + (s % hangul_n_count) / hangul_t_count);
    if (s % hangul_t_count != 0) out.push_back(hangul_t + s % hangul_t_count);
    return;
  }
  const auto* end = tables::decompositions + tables::decompositions_size;
  const auto* it = std::lower_bound(tables::decompositions, end, cp,
                                    [](const tables::decomposition& d, char32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), tables::decomposition_pool + it->offset, tables::decomposition_pool + it->offset + it->length);
}

/// Stable sort of every run of non-starters by combining class (canonical ordering).
void reorder_marks(std::vector<char32_t>& cps) {
  const auto by_class = [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); };
  for (std::size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    if (j - i > 1) std::stable_sort(cps.begin() + i, cps.begin() + j, by_class);
    i = j;
  }
}

/// The primary composite of `first + second`, or 0 when there is none.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= hangul_l && first < hangul_l + hangul_l_count && second >= hangul_v && second < hangul_v + hangul_v_count)
    return hangul_s + ((first - hangul_l) * hangul_v_count + (second - hangul_v)) * hangul_t_count;
  if (first >= hangul_s && first < hangul_s + hangul_s_count && (first - hangul_s) % hangul_t_count == 0 &&
      second > hangul_t && second < hangul_t + hangul_t_count)
    return first + (second - hangul_t);
  const auto* end = tables::compositions + tables::compositions_size;
  const auto* it = std::lower_bound(tables::compositions, end, std::pair{first, second},
                                    [](const tables::composition& c, const std::pair<char32_t, char32_t>& key) {
                                      return c.first != key.first ? c.first < key.first : c.second < key.second;
                                    });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

/// Composes in place: a mark joins the last starter unless a mark of the same or a higher class,
/// or another starter, stands between them.
void compose(std::vector<char32_t>& cps) {
  std::size_t out = 0;
  std::size_t starter = cps.size();  // none yet
  std::uint8_t last_cc = 0;
  for (const char32_t c : cps) {
    const auto cc = combining_class(c);
    if (starter != cps.size()) {
      const bool adjacent = out == starter + 1;
      if (adjacent || (last_cc != 0 && last_cc < cc)) {
        if (const char32_t composite = compose_pair(cps[starter], c)) {
          cps[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = out;
    last_cc = cc;
    cps[out++] = c;
  }
  cps.resize(out);
}

}  // namespace

utf8_step decode_utf8(std::string_view s, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  if (lead < 0x80) return {lead, 1, false, false};
  std::size_t need = 0;
  char32_t cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range the next continuation byte must fall in
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    cp = lead & 0x0F;
    if (lead == 0xE0) lo = 0xA0;  // no overlong forms
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    cp = lead & 0x07;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0xFFFD, 1, true, false};
  }
  for (std::size_t i = 1; i <= need; ++i) {
    if (pos + i >= s.size()) return {0xFFFD, i, true, true};
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if (b < lo || b > hi) return {0xFFFD, i, true, false};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, false, false};
}

char32_t next_code_point(std::string_view valid, std::size_t& pos) {
  const auto step = decode_utf8(valid, pos);
  pos += step.length;
  return step.cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    const auto step = decode_utf8(s, pos);
    if (step.invalid) return false;
    pos += step.length;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) {
    const auto step = decode_utf8(s, pos);
    if (step.invalid)
      out += "\xEF\xBF\xBD";
    else
      out.append(s.substr(pos, step.length));
    pos += step.length;
  }
  return out;
}

std::size_t complete_prefix_length(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    const auto step = decode_utf8(s, pos);
    if (step.truncated) return pos;
    pos += step.length;
  }
  return s.size();
}

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(tables::letter_ranges, tables::letter_ranges_size, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(tables::number_ranges, tables::number_ranges_size, cp);
}

bool is_pattern_space(char32_t cp) {
  return in_ranges(tables::pattern_space_ranges, tables::pattern_space_ranges_size, cp);
}

bool is_word_char(char32_t cp) { return in_ranges(tables::word_ranges, tables::word_ranges_size, cp); }

bool is_strip_space(char32_t cp) {
  return in_ranges(tables::strip_space_ranges, tables::strip_space_ranges_size, cp);
}

std::string nfc(std::string_view valid) {
  if (std::all_of(valid.begin(), valid.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(valid);
  std::vector<char32_t> cps;
  cps.reserve(valid.size());
  for (std::size_t pos = 0; pos < valid.size();) decompose(next_code_point(valid, pos), cps);
  reorder_marks(cps);
  compose(cps);
  std::string out;
  out.reserve(valid.size());
  for (const char32_t c : cps) append_utf8(out, c);
  return out;
}

}  // namespace mpakt::models::unicode
