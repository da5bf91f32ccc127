/* What avformat_find_stream_info costs an audio open (a benchmark, not a test: it asserts
 * nothing). For every file given, 3 passes: the time and the bytes the probe reads, in three ways
 * (the way audio_decoder.cc chose is the third):
 *   0  probe every stream (what the audio decoder did before 2026-12-03);
 *   1  discard all but the only audio stream, then probe (the probe waits for the discarded
 *      video's parameters until 5 s of audio are read);
 *   2  no probe: the MP4/Matroska header states the audio stream's parameters.
 *
 *   cc -O2 benchmarks/probe_cost.c -o /tmp/probe_cost $(pkg-config --cflags --libs libavformat libavutil)
 *   cd data/audio-bench && for m in 0 1 2; do /tmp/probe_cost $m videos/\*\/\*.mp4; done
 */
#include <libavformat/avformat.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s 0|1|2 FILE...\n", argv[0]);
    return 2;
  }
  const int mode = atoi(argv[1]);
  double seconds = 0, bytes = 0;
  int n = 0;
  av_log_set_level(AV_LOG_QUIET);
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 2; i < argc; i++) {
      AVFormatContext* f = NULL;
      if (avformat_open_input(&f, argv[i], NULL, NULL) < 0) {
        fprintf(stderr, "cannot open %s\n", argv[i]);
        continue;
      }
      const int64_t read0 = f->pb->bytes_read;
      const double t0 = now();
      if (mode >= 1) {
        const int a = av_find_best_stream(f, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
        for (unsigned k = 0; a >= 0 && k < f->nb_streams; k++)
          if ((int)k != a) f->streams[k]->discard = AVDISCARD_ALL;
      }
      if (mode <= 1) avformat_find_stream_info(f, NULL);
      seconds += now() - t0;
      bytes += (double)(f->pb->bytes_read - read0);
      n++;
      avformat_close_input(&f);
    }
  }
  if (n == 0) return 1;
  printf("mode %d: %.3f ms and %.0f KB a file (%d opens)\n", mode, seconds / n * 1e3,
         bytes / n / 1024, n);
  return 0;
}
