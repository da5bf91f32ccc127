#pragma once
#include <cstddef>
#include <cstdint>

namespace loadscope::decode {

// EXIF orientation (1..8) from the payload of an APP1 segment ("Exif\0\0" + TIFF).
// Returns 1 (upright) when the segment is not EXIF, has no orientation tag, or is malformed:
// a broken EXIF block must not make a decodable image fail.
int exif_orientation(const uint8_t* app1, size_t size);

}  // namespace loadscope::decode
