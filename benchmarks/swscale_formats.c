/* swscale's cost per video frame converted to 224x224 by output format and filter: the
 * measurement behind Note [planar output when resizing] (decode/video/video_convert.cc). A
 * benchmark, not a test: it asserts nothing. Synthetic 1280x720 yuv420p input, crops of the sizes given.
 *
 *   cc -O2 benchmarks/swscale_formats.c -o /tmp/swscale_formats $(pkg-config --cflags --libs libswscale libavutil)
 *   /tmp/swscale_formats 720 720     # crop width, height
 *
 * Prints ms per frame per (format, filter) and each against packed RGB24 bilinear, in one run. */
#include <libswscale/swscale.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int W = 1280, H = 720, ow = 224, oh = 224, n = 400;
  const int cw = argc > 2 ? atoi(argv[1]) : 720, ch = argc > 2 ? atoi(argv[2]) : 720;
  if (cw < 2 || ch < 2 || cw > W || ch > H) return fprintf(stderr, "crop within 1280x720\n"), 2;
  uint8_t *y = malloc(W * H), *u = malloc(W * H / 4), *v = malloc(W * H / 4);
  for (int i = 0; i < W * H; i++) y[i] = (uint8_t)(i * 7 + i / W * 3);
  for (int i = 0; i < W * H / 4; i++) u[i] = (uint8_t)(i * 5), v[i] = (uint8_t)(i * 3);
  const uint8_t* src[4] = {y, u, v, NULL};
  const int src_stride[4] = {W, W / 2, W / 2, 0};
  const struct { const char* name; enum AVPixelFormat fmt; int flags; } cfg[] = {
      {"rgb24 bilinear", AV_PIX_FMT_RGB24, SWS_BILINEAR}, {"gbrp bilinear", AV_PIX_FMT_GBRP, SWS_BILINEAR},
      {"gbrp area", AV_PIX_FMT_GBRP, SWS_AREA},           {"gbrp fast_bilinear", AV_PIX_FMT_GBRP, SWS_FAST_BILINEAR},
      {"gbrp point", AV_PIX_FMT_GBRP, SWS_POINT},
      /* Scaling alone, no RGB: what the YUV-to-RGB output stage costs on top. */
      {"yuv444p bilinear", AV_PIX_FMT_YUV444P, SWS_BILINEAR},
  };
  uint8_t* out = malloc((size_t)(ow + 64) * 3 * oh * 3 + 4096);
  double base = 0;
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    struct SwsContext* s = sws_getContext(cw, ch, AV_PIX_FMT_YUV420P, ow, oh, cfg[c].fmt, cfg[c].flags, NULL, NULL, NULL);
    const int planar = cfg[c].fmt == AV_PIX_FMT_GBRP || cfg[c].fmt == AV_PIX_FMT_YUV444P, stride = (ow + 64) * (planar ? 1 : 3);
    uint8_t* dst[4] = {out, planar ? out + stride * oh : NULL, planar ? out + 2 * stride * oh : NULL, NULL};
    const int dst_stride[4] = {stride, planar ? stride : 0, planar ? stride : 0, 0};
    sws_scale(s, src, src_stride, 0, ch, dst, dst_stride);  /* warm-up */
    const double t0 = now();
    for (int i = 0; i < n; i++) sws_scale(s, src, src_stride, 0, ch, dst, dst_stride);
    const double ms = (now() - t0) / n * 1e3;
    if (c == 0) base = ms;
    printf("%dx%d -> %dx%d  %-20s %.3f ms/frame  %.2fx rgb24 bilinear's time\n", cw, ch, ow, oh, cfg[c].name, ms,
           ms / base);
    sws_freeContext(s);
  }
  return 0;
}
