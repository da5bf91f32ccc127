// Text checks shared by the readers of text: manifests (io/manifest.cc) and the Text and Json
// fields (pipeline/plain_fields.cc). One UTF-8 validator, so that a row and a member are held to
// the same rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loadscope::io::text {

// True when `s` is UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates (U+D800 to
// U+DFFF), nothing above U+10FFFF, no truncated sequence. Eight ASCII bytes at a time.
bool valid_utf8(std::string_view s);

// Appends code point `cp` (at most U+10FFFF, not a surrogate: the caller checks) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace loadscope::io::text
