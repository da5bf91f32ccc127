#pragma once
// What a header may claim before loadscope decodes anything: the bounds that keep the work
// and the memory of one sample within what a sane file of the same output costs
// (docs/reliability.md "Bounded work per sample"). A claim outside them is refused before the
// decoder is opened, as a DecodeFailure naming the claim and the bound — a crafted WAV whose
// header says 1442856576 Hz once cost 12 s and 2 GB to become a 2-second clip, because the
// resampler's filter grows with the ratio of the two rates.
//
// Declared here once: the decoders check them, the fields' option bounds take theirs from
// them (pipeline/field.h), and Python reads them (_native.decode_limits()).

#include <cstdint>

namespace loadscope::decode {

// Audio: the highest rate of real recordings (768 kHz, the top of DXD/PCM hardware).
inline constexpr int kMaxSampleRate = 768000;
// Channels of a stream (ambisonics of order 7 has 64). FFmpeg's own limit is 512.
inline constexpr int kMaxChannels = 64;
// The ratio of the output rate to the input rate, either way: swresample's polyphase filter
// holds about 32 taps per unit of the ratio when it downsamples and its buffers grow with the
// ratio when it upsamples. 768 kHz to 3 kHz, or 3 kHz to 768 kHz, is within it.
inline constexpr int kMaxResampleRatio = 256;

// Video: the largest frame H.264 and HEVC levels define (level 6.2: 139264 macroblocks of
// 16x16, 8192x4352), and a side no codec of the format table exceeds. A decoder holds up to 16
// reference frames of this size: about 0.9 GB at 4:2:0, the most a thread may take.
// (A stream's frame rate and time base bound nothing: clips are planned from the timestamps
// the index read, whose number the file's size bounds; a 1/1e9 time base decodes as any other,
// tested.)
inline constexpr int64_t kMaxVideoPixels = int64_t{139264} * 256;
inline constexpr int kMaxVideoSide = 16384;

}  // namespace loadscope::decode
