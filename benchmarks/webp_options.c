/* What libwebp's decoding options save on RandomResizedCrop-like regions (a benchmark, not a
 * test: it asserts nothing). One thread, every file given decoded from memory, 2 passes, the
 * same regions for every mode (area 8-100% of the image, aspect 3/4-4/3, uniform position):
 *   0  whole image to RGB (what a loader without region decoding does)
 *   1  the region, libwebp's cropping, to RGB (what loadscope and the region ceiling do)
 *   2  the region to YUV: no colour conversion
 *   3  the region to RGB without fancy upsampling (chroma point-sampled)
 *   4  the region to RGB without the in-loop filter
 *
 *   cc -O2 benchmarks/webp_options.c -o /tmp/webp_options $(pkg-config --cflags --libs libwebp) -lm
 *   for m in 0 1 2 3 4; do /tmp/webp_options $m $(find data/demo-webp -name '*.webp'); done
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <webp/decode.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODE FILE...\n", argv[0]);
    return 2;
  }
  const int mode = atoi(argv[1]), n = argc - 2;
  uint8_t** data = calloc(n, sizeof *data);
  size_t* size = calloc(n, sizeof *size);
  size_t biggest = 0;
  for (int i = 0; i < n; ++i) {
    FILE* f = fopen(argv[i + 2], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    size[i] = ftell(f);
    rewind(f);
    data[i] = malloc(size[i]);
    if (fread(data[i], 1, size[i], f) != size[i]) return 1;
    fclose(f);
    int w, h;
    if (!WebPGetInfo(data[i], size[i], &w, &h)) return 1;
    if ((size_t)w * h * 3 > biggest) biggest = (size_t)w * h * 3;
  }
  uint8_t* out = malloc(biggest);
  srand(1);
  const double t0 = now();
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < n; ++i) {
      int W, H;
      WebPGetInfo(data[i], size[i], &W, &H);
      const double area = W * H * (0.08 + 0.92 * rand() / (double)RAND_MAX);
      const double r = exp(log(3. / 4) + (log(4. / 3) - log(3. / 4)) * rand() / (double)RAND_MAX);
      int cw = (int)round(sqrt(area * r)), ch = (int)round(sqrt(area / r));
      if (cw > W) cw = W;
      if (ch > H) ch = H;
      const int x = rand() % (W - cw + 1), y = rand() % (H - ch + 1);
      WebPDecoderConfig c;
      WebPInitDecoderConfig(&c);
      if (mode == 0) {
        cw = W;
        ch = H;
      } else {
        c.options.use_cropping = 1;
        c.options.crop_left = x;
        c.options.crop_top = y;
        c.options.crop_width = cw;
        c.options.crop_height = ch;
      }
      c.options.no_fancy_upsampling = mode == 3;
      c.options.bypass_filtering = mode == 4;
      c.output.colorspace = mode == 2 ? MODE_YUV : MODE_RGB;
      if (mode != 2) {
        c.output.is_external_memory = 1;
        c.output.u.RGBA.rgba = out;
        c.output.u.RGBA.stride = cw * 3;
        c.output.u.RGBA.size = biggest;
      }
      const VP8StatusCode rc = WebPDecode(data[i], size[i], &c);
      WebPFreeDecBuffer(&c.output);
      if (rc != VP8_STATUS_OK) {
        fprintf(stderr, "%s: status %d\n", argv[i + 2], rc);
        return 1;
      }
    }
  }
  printf("mode %d: %.3f ms per image (%d files, 2 passes)\n", mode, (now() - t0) / (2.0 * n) * 1e3, n);
  return 0;
}
