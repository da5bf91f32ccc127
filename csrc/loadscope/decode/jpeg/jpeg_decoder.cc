#include "loadscope/decode/jpeg/jpeg_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "loadscope/core/error.h"
#include "loadscope/decode/jpeg/exif.h"

namespace loadscope::decode {

// Note [libjpeg errors]
// libjpeg reports fatal errors through error_exit, which must not return; we longjmp back to
// the setjmp in the calling function. Those functions keep only trivially destructible locals
// between setjmp and any libjpeg call, so the jump skips no destructor; the message is turned
// into a C++ exception after the jump. "Premature end of JPEG file" is only a warning to
// libjpeg (it pads with grey); we make it fatal, as torchvision does, so a truncated file
// never becomes a silently grey-bottomed image.
struct JpegDecoder::State {
  jpeg_decompress_struct cinfo{};
  struct Err {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    char warning[JMSG_LENGTH_MAX];
    int warnings;
  } err{};
  const uint8_t* data = nullptr;
  size_t size = 0;
  bool cmyk = false;
  bool fresh = false;  // header read and nothing decoded since: no need to read it again

  static void on_error(j_common_ptr cinfo) {
    auto* e = reinterpret_cast<Err*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
  }
  static void on_message(j_common_ptr cinfo, int level) {
    if (level >= 0) return;  // trace messages
    auto* e = reinterpret_cast<Err*>(cinfo->err);
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
      (*cinfo->err->format_message)(cinfo, e->message);
      std::longjmp(e->jump, 1);
    }
    if (e->warnings++ == 0) (*cinfo->err->format_message)(cinfo, e->warning);
  }

  State() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = &State::on_error;
    err.pub.emit_message = &State::on_message;
    jpeg_create_decompress(&cinfo);
  }
  ~State() { jpeg_destroy_decompress(&cinfo); }
};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {}
JpegDecoder::~JpegDecoder() = default;

namespace {

// Note [structural check]
// Before decoding, the bytes after the first scan header are walked marker by marker (a
// memchr-speed pass): entropy-coded data may contain only stuffed 0xFF00, restart markers and,
// between the scans of a progressive file, table and scan segments; the image must end with
// EOI. This catches truncation and foreign markers whatever region is decoded later, so that
// a sample's fate never depends on which crop it drew. (libjpeg itself would notice a bad
// marker only on reaching it, i.e. not at all for a crop above it.)
// Returns "" when the structure is sound, else the reason.
std::string check_structure(const uint8_t* p, const uint8_t* end, const uint8_t* start) {
  while (p + 1 < end) {
    p = static_cast<const uint8_t*>(std::memchr(p, 0xFF, static_cast<size_t>(end - p - 1)));
    if (p == nullptr) break;
    const uint8_t m = p[1];
    if (m == 0x00 || (m >= 0xD0 && m <= 0xD7)) {
      p += 2;
    } else if (m == 0xFF) {
      p += 1;  // fill byte before a marker
    } else if (m == 0xD9) {
      return "";
    } else if (m == 0xC4 || m == 0xCC || m == 0xDA || m == 0xDB || m == 0xDC || m == 0xDD ||
               (m >= 0xE0 && m <= 0xEF) || m == 0xFE) {
      if (end - p < 4) break;
      const size_t len = (static_cast<size_t>(p[2]) << 8) | p[3];
      if (len < 2) return "corrupt marker segment length at byte " + std::to_string(p - start);
      p += 2 + len;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", m);
      return std::string("Unsupported marker type ") + hex + " in the scan data at byte " +
             std::to_string(p - start);
    }
  }
  return "truncated (no end-of-image marker after the scan data)";
}

// Fully protected step functions; see Note [libjpeg errors].
bool read_header(jpeg_decompress_struct* cinfo, std::jmp_buf& jump, const uint8_t* data,
                 size_t size) {
  if (setjmp(jump)) return false;
  jpeg_abort_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool start(jpeg_decompress_struct* cinfo, std::jmp_buf& jump, JDIMENSION* x0, JDIMENSION* width,
           JDIMENSION skip) {
  if (setjmp(jump)) return false;
  jpeg_start_decompress(cinfo);
  if (*x0 > 0 || *width < cinfo->output_width) jpeg_crop_scanline(cinfo, x0, width);
  if (skip > 0) jpeg_skip_scanlines(cinfo, skip);
  return true;
}

bool read_rows(jpeg_decompress_struct* cinfo, std::jmp_buf& jump, uint8_t* dst, size_t stride,
               JDIMENSION rows) {
  if (setjmp(jump)) return false;
  JDIMENSION done = 0;
  while (done < rows) {
    JSAMPROW row[4];
    JDIMENSION n = rows - done < 4 ? rows - done : 4;
    for (JDIMENSION i = 0; i < n; ++i) row[i] = dst + (done + i) * stride;
    done += jpeg_read_scanlines(cinfo, row, n);
  }
  jpeg_abort_decompress(cinfo);  // rows below the region are never decoded
  return true;
}

}  // namespace

JpegInfo JpegDecoder::open(const uint8_t* data, size_t size) {
  State& s = *state_;
  s.err.warnings = 0;
  s.err.warning[0] = '\0';
  warning_.clear();
  if (!read_header(&s.cinfo, s.err.jump, data, size)) {
    throw DecodeFailure(std::string("JPEG: ") + s.err.message);
  }
  // The source manager now points just past the first scan's header.
  const std::string broken = check_structure(s.cinfo.src->next_input_byte, data + size, data);
  if (!broken.empty()) throw DecodeFailure("JPEG: " + broken);
  s.data = data;
  s.size = size;
  s.fresh = true;
  JpegInfo info;
  info.width = static_cast<int>(s.cinfo.image_width);
  info.height = static_cast<int>(s.cinfo.image_height);
  info.components = s.cinfo.num_components;
  for (auto* m = s.cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1) {
      int o = exif_orientation(m->data, m->data_length);
      if (o != 1) {
        info.orientation = o;
        break;
      }
    }
  }
  s.cmyk = s.cinfo.jpeg_color_space == JCS_CMYK || s.cinfo.jpeg_color_space == JCS_YCCK;
  return info;
}

RgbView JpegDecoder::decode(int num, Rect region) {
  State& s = *state_;
  if (s.data == nullptr) throw DecodeFailure("JPEG: decode() without open()");
  s.cinfo.scale_num = static_cast<unsigned>(num);
  s.cinfo.scale_denom = 8;
  s.cinfo.dct_method = JDCT_ISLOW;  // what PIL and djpeg use by default: identical pixels
  s.cinfo.do_fancy_upsampling = TRUE;
  s.cinfo.out_color_space = s.cmyk ? JCS_CMYK : JCS_RGB;
  const int full_w = scaled_size(static_cast<int>(s.cinfo.image_width), num);
  const int full_h = scaled_size(static_cast<int>(s.cinfo.image_height), num);
  region.x0 = std::max(region.x0, 0);
  region.y0 = std::max(region.y0, 0);
  region.x1 = std::min(region.x1, full_w);
  region.y1 = std::min(region.y1, full_h);
  if (region.width() <= 0 || region.height() <= 0) {
    throw DecodeFailure("JPEG: empty decode region");
  }
  JDIMENSION x0 = static_cast<JDIMENSION>(region.x0);
  // Two more columns than asked: fancy upsampling of a pixel at the crop's right edge reads the
  // chroma sample beyond it, and without it the edge column differs from a full decode.
  JDIMENSION width = static_cast<JDIMENSION>(std::min(region.x1 + 2, full_w) - region.x0);
  // A second decode of the same image starts over from the header.
  const bool fresh = s.fresh;
  s.fresh = false;
  if ((!fresh && !read_header(&s.cinfo, s.err.jump, s.data, s.size)) ||
      !start(&s.cinfo, s.err.jump, &x0, &width, static_cast<JDIMENSION>(region.y0))) {
    s.data = nullptr;
    throw DecodeFailure(std::string("JPEG: ") + s.err.message);
  }
  const int comps = s.cinfo.output_components;
  const size_t stride = static_cast<size_t>(s.cinfo.output_width) * comps;
  const JDIMENSION rows = static_cast<JDIMENSION>(region.height());
  pixels_.resize(stride * rows);
  if (!read_rows(&s.cinfo, s.err.jump, pixels_.data(), stride, rows)) {
    s.data = nullptr;
    throw DecodeFailure(std::string("JPEG: ") + s.err.message);
  }
  if (s.err.warnings > 0) warning_ = std::string("JPEG: ") + s.err.warning;

  RgbView view;
  view.width = static_cast<int>(s.cinfo.output_width);
  view.height = static_cast<int>(rows);
  view.x0 = static_cast<int>(x0);
  view.y0 = region.y0;
  if (s.cmyk) {
    // Adobe writes inverted CMYK, which libjpeg returns as is: R = C * K / 255 on those values
    // (what libjpeg-turbo's own CMYK->RGB and torchvision do). Converted in place, 4 -> 3 bytes.
    for (JDIMENSION y = 0; y < rows; ++y) {
      uint8_t* row = pixels_.data() + y * stride;
      for (int x = 0; x < view.width; ++x) {
        const int k = row[4 * x + 3];
        const int c = row[4 * x], m = row[4 * x + 1], yy = row[4 * x + 2];
        row[3 * x] = static_cast<uint8_t>((c * k + 127) / 255);
        row[3 * x + 1] = static_cast<uint8_t>((m * k + 127) / 255);
        row[3 * x + 2] = static_cast<uint8_t>((yy * k + 127) / 255);
      }
    }
  }
  view.data = pixels_.data();
  view.stride = stride;
  return view;
}

}  // namespace loadscope::decode
