// io/text.h: the one UTF-8 validator of manifests and Text/Json fields, against the cases of
// RFC 3629 (section 3 and 10) and Markus Kuhn's UTF-8 decoder stress test.
#include <string>

#include "helpers.h"
#include "loadscope/io/text.h"

using loadscope::io::text::append_utf8;
using loadscope::io::text::valid_utf8;

TEST_CASE("valid UTF-8: ASCII, every sequence length and the boundaries of the code space") {
  CHECK(valid_utf8(""));
  CHECK(valid_utf8("plain ASCII, long enough for the eight-byte path"));
  CHECK(valid_utf8("\x7F"));              // U+007F, the last 1-byte
  CHECK(valid_utf8("\xC2\x80"));          // U+0080, the first 2-byte
  CHECK(valid_utf8("\xDF\xBF"));          // U+07FF
  CHECK(valid_utf8("\xE0\xA0\x80"));      // U+0800, the first 3-byte
  CHECK(valid_utf8("\xED\x9F\xBF"));      // U+D7FF, below the surrogates
  CHECK(valid_utf8("\xEE\x80\x80"));      // U+E000, above them
  CHECK(valid_utf8("\xEF\xBF\xBF"));      // U+FFFF
  CHECK(valid_utf8("\xF0\x90\x80\x80"));  // U+10000, the first 4-byte
  CHECK(valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
  CHECK(valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 and ASCII after it"));  // é € 😀
}

TEST_CASE("invalid UTF-8: overlongs, surrogates, beyond U+10FFFF, stray and missing bytes") {
  CHECK_FALSE(valid_utf8("\xC0\x80"));          // overlong U+0000
  CHECK_FALSE(valid_utf8("\xC1\xBF"));          // overlong U+007F
  CHECK_FALSE(valid_utf8("\xE0\x9F\xBF"));      // overlong U+07FF
  CHECK_FALSE(valid_utf8("\xF0\x8F\xBF\xBF"));  // overlong U+FFFF
  CHECK_FALSE(valid_utf8("\xED\xA0\x80"));      // U+D800, a surrogate
  CHECK_FALSE(valid_utf8("\xED\xBF\xBF"));      // U+DFFF
  CHECK_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // U+110000
  CHECK_FALSE(valid_utf8("\xF5\x80\x80\x80"));  // a lead byte no sequence may have
  CHECK_FALSE(valid_utf8("\xFF"));
  CHECK_FALSE(valid_utf8("\x80"));  // a continuation byte alone
  CHECK_FALSE(valid_utf8("\xC3"));  // a sequence cut short at the end
  CHECK_FALSE(valid_utf8("\xE2\x82"));
  CHECK_FALSE(valid_utf8("\xE2\x82 and ASCII"));  // cut short, then more text
  CHECK_FALSE(valid_utf8(std::string("eight ASCII bytes, then \xF0\x9F\x98")));
}

TEST_CASE("append_utf8 writes what valid_utf8 accepts, at every length boundary") {
  for (uint32_t cp :
       {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(s, cp);
    CHECK(valid_utf8(s));
    CHECK(s.size() == (cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u));
  }
  std::string euro;
  append_utf8(euro, 0x20AC);
  CHECK(euro == "\xE2\x82\xAC");
}
