/* Issue 14's next lever, measured (a benchmark, not a test: it asserts nothing). Converting a
 * yuv420p crop to 224x224 planar RGB: swscale scaling both ways (what decode/video/video_convert.cc
 * does), against filtering vertically first in plain C (a triangle filter as wide as the downscale,
 * to 4:2:2 at the output's height) and letting swscale scale horizontally only, so that only the
 * output's rows are filtered horizontally. Prints ms per frame for both and how far apart their
 * pixels are. Synthetic 1280x720 input (smooth pattern plus noise), crops of the size given.
 *
 *   cc -O3 -march=native benchmarks/vertical_first.c -o /tmp/vertical_first $(pkg-config --cflags --libs libswscale libavutil) -lm
 *   /tmp/vertical_first 720 720     # crop width, height (even)
 *
 * The vertical pass is plain C left to the compiler: it wins only where the compiler vectorizes
 * it wide (-O3 -march=native on an AVX-512 machine); at -O3 with SSE2 it loses to swscale, at -O2
 * it is scalar. A real implementation would need hand-written SIMD or runtime dispatch.
 */
#include <libswscale/swscale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  int first, n;
  int16_t w[64];
} Taps;

/* Output row y of `out` from `in` rows: centred at (y + 0.5) * scale - 0.5 - offset source
 * rows, a triangle of half-width max(scale, 1), 14-bit weights summing to 1 << 14. */
static void plan(Taps* t, int out, double scale, double offset) {
  for (int y = 0; y < out; y++) {
    const double c = (y + 0.5) * scale - 0.5 - offset, s = scale > 1 ? scale : 1;
    const int a = (int)ceil(c - s), b = (int)floor(c + s);
    double ws[64], sum = 0;
    int n = 0, acc = 0;
    for (int j = a; j <= b && n < 64; j++) {
      const double w = 1 - fabs(j - c) / s;
      ws[n++] = w > 0 ? w : 0;
      sum += ws[n - 1];
    }
    t[y].first = a, t[y].n = n;
    for (int i = 0; i < n; i++) acc += t[y].w[i] = (int16_t)lrint(ws[i] / sum * 16384);
    t[y].w[n / 2] += 16384 - acc;
  }
}

static void vertical(const uint8_t* src, int stride, int w, int h, const Taps* t, int out, uint8_t* dst) {
  uint32_t acc[4096]; /* local: a static one may alias the rows, and the loops stay scalar */
  for (int y = 0; y < out; y++) {
    for (int x = 0; x < w; x++) acc[x] = 8192;
    for (int i = 0; i < t[y].n; i++) {
      int j = t[y].first + i;
      j = j < 0 ? 0 : j > h - 1 ? h - 1 : j;
      const uint8_t* r = src + (size_t)j * stride;
      const uint32_t wt = (uint32_t)t[y].w[i];
      for (int x = 0; x < w; x++) acc[x] += wt * r[x];
    }
    for (int x = 0; x < w; x++) dst[(size_t)y * w + x] = (uint8_t)(acc[x] >> 14);
  }
}

int main(int argc, char** argv) {
  const int W = 1280, H = 720, ow = 224, oh = 224, n = 400;
  const int cw = argc > 2 ? atoi(argv[1]) & ~1 : 720, ch = argc > 2 ? atoi(argv[2]) & ~1 : 720;
  if (cw < oh || ch < oh || cw > W || ch > H) return fprintf(stderr, "crop of 224..1280 x 224..720\n"), 2;
  uint8_t *y = malloc(W * H), *u = malloc(W * H / 4), *v = malloc(W * H / 4);
  srand(1);
  for (int i = 0; i < W * H; i++) y[i] = (uint8_t)(128 + 60 * sin(i % W * 0.05) * cos(i / W * 0.03) + rand() % 8);
  for (int i = 0; i < W * H / 4; i++)
    u[i] = (uint8_t)(128 + 40 * sin(i % (W / 2) * 0.07)), v[i] = (uint8_t)(128 + 40 * cos(i / (W / 2) * 0.05));
  const uint8_t* src[4] = {y, u, v, NULL};
  const int src_stride[4] = {W, W / 2, W / 2, 0};
  const int stride = ow + 64;
  uint8_t *a = malloc(stride * oh * 3), *b = malloc(stride * oh * 3);
  uint8_t* da[4] = {a, a + stride * oh, a + 2 * stride * oh, NULL};
  uint8_t* db[4] = {b, b + stride * oh, b + 2 * stride * oh, NULL};
  const int ds[4] = {stride, stride, stride, 0};
  struct SwsContext* both = sws_getContext(cw, ch, AV_PIX_FMT_YUV420P, ow, oh, AV_PIX_FMT_GBRP, SWS_BILINEAR, NULL, NULL, NULL);
  struct SwsContext* horiz = sws_getContext(cw, oh, AV_PIX_FMT_YUV422P, ow, oh, AV_PIX_FMT_GBRP, SWS_BILINEAR, NULL, NULL, NULL);
  Taps *tl = malloc(sizeof(Taps) * oh), *tc = malloc(sizeof(Taps) * oh);
  plan(tl, oh, (double)ch / oh, 0);
  plan(tc, oh, (double)ch / oh / 2, 0.25); /* 4:2:0 chroma rows sit between two luma rows */
  uint8_t* mid = malloc((size_t)cw * oh * 2);
  const uint8_t* m[4] = {mid, mid + cw * oh, mid + cw * oh + cw / 2 * oh, NULL};
  const int ms[4] = {cw, cw / 2, cw / 2, 0};
  for (int round = 0; round < 3; round++) {
    const double t0 = now();
    for (int i = 0; i < n; i++) sws_scale(both, src, src_stride, 0, ch, da, ds);
    const double t1 = now();
    for (int i = 0; i < n; i++) {
      vertical(y, W, cw, ch, tl, oh, (uint8_t*)m[0]);
      vertical(u, W / 2, cw / 2, ch / 2, tc, oh, (uint8_t*)m[1]);
      vertical(v, W / 2, cw / 2, ch / 2, tc, oh, (uint8_t*)m[2]);
      sws_scale(horiz, m, ms, 0, oh, db, ds);
    }
    const double t2 = now();
    printf("%dx%d -> 224x224  swscale both ways %.3f ms/frame  vertical first %.3f ms/frame  (%.2fx)\n", cw, ch,
           (t1 - t0) / n * 1e3, (t2 - t1) / n * 1e3, (t2 - t1) / (t1 - t0));
  }
  long sum = 0;
  int max = 0;
  for (int p = 0; p < 3; p++)
    for (int r = 0; r < oh; r++)
      for (int x = 0; x < ow; x++) {
        const int d = abs(da[p][r * stride + x] - db[p][r * stride + x]);
        sum += d, max = d > max ? d : max;
      }
  printf("pixels against swscale both ways: mean |diff| %.3f, max %d\n", (double)sum / (3 * ow * oh), max);
  return 0;
}
