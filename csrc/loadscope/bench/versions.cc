#include "loadscope/bench/versions.h"

#include <jconfig.h>
#include <webp/decode.h>
#include <zlib.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libswscale/swscale.h>
}

#include <oneapi/tbb/version.h>

// jconfig.h defines LIBJPEG_TURBO_VERSION as bare tokens (2.1.5), not a string.
#define LOADSCOPE_STR2(x) #x
#define LOADSCOPE_STR(x) LOADSCOPE_STR2(x)

namespace loadscope::bench {
namespace {

std::string dotted(
    unsigned v) {  // FFmpeg's AV_VERSION_INT packing: major << 16 | minor << 8 | micro
  return std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) + "." +
         std::to_string(v & 0xff);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> library_versions() {
  return {
      {"ffmpeg", av_version_info()},
      // Which FFmpeg is loaded: Debian's links GPL parts, the one a wheel carries does not.
      {"ffmpeg_license", avcodec_license()},
      {"libavcodec", dotted(avcodec_version()) + " (built " + dotted(LIBAVCODEC_VERSION_INT) + ")"},
      {"libavformat",
       dotted(avformat_version()) + " (built " + dotted(LIBAVFORMAT_VERSION_INT) + ")"},
      {"libavutil", dotted(avutil_version()) + " (built " + dotted(LIBAVUTIL_VERSION_INT) + ")"},
      {"libswscale", dotted(swscale_version()) + " (built " + dotted(LIBSWSCALE_VERSION_INT) + ")"},
#ifdef LIBJPEG_TURBO_VERSION
      {"libjpeg-turbo", LOADSCOPE_STR(LIBJPEG_TURBO_VERSION) " (headers)"},
#endif
      {"libwebp", dotted(static_cast<unsigned>(WebPGetDecoderVersion()))},
      {"onetbb", std::string(TBB_runtime_version()) + " (built " TBB_VERSION_STRING ")"},
      {"zlib", zlibVersion()},
  };
}

}  // namespace loadscope::bench
