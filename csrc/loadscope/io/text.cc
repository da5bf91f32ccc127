#include "loadscope/io/text.h"

#include <cstdio>
#include <cstring>

namespace loadscope::io::text {

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    if (end - p >= 8) {  // the common case: eight ASCII bytes at once
      uint64_t w;
      std::memcpy(&w, p, 8);
      if (!(w & 0x8080808080808080ull)) {
        p += 8;
        continue;
      }
    }
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (int k = 2; k <= n; ++k) {
      if (p[k] < 0x80 || p[k] > 0xBF) return false;
    }
    p += n + 1;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
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

}  // namespace loadscope::io::text

namespace loadscope::io::text {

std::string check_json(std::string_view doc) {
  if (!valid_utf8(doc)) return "not valid UTF-8";
  try {
    JsonScanner s(doc.data(), doc.data() + doc.size(), nullptr);
    s.value(0, doc.data(), nullptr, nullptr);
    if (!s.at_end()) return "extra data after the value" + s.where();
  } catch (const JsonError& e) {
    return e.what;
  }
  return "";
}

}  // namespace loadscope::io::text
