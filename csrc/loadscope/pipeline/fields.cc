#include "loadscope/pipeline/fields.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <stdexcept>
#include <typeindex>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"

namespace loadscope::pipeline {

const IntBound& int_bound(const char* name) {
  for (const auto& b : kIntBounds) {
    if (std::strcmp(b.name, name) == 0) return b;
  }
  throw std::logic_error(std::string("no bound named ") + name);
}

void check_bound(const std::string& field, const char* option, int64_t value) {
  const IntBound& b = int_bound(option);
  if (value >= b.min && value <= b.max) return;
  throw ConfigError("field '" + field + "': " + option + " must be " + std::to_string(b.min) +
                    (b.max == INT64_MAX ? " or more" : ".." + std::to_string(b.max)));
}

uint64_t read_member(const Member& m, std::string& out) {
  if (m.fetched.valid()) {
    const std::shared_ptr<const std::string> span = m.fetched.get();
    const uint64_t want = m.whole_file() ? span->size() : static_cast<uint64_t>(m.length);
    if (m.fetched_at + want > span->size()) throw ReadFailure("short read of a prefetched range");
    out.assign(*span, static_cast<size_t>(m.fetched_at), static_cast<size_t>(want));
    return want;
  }
  return m.whole_file() ? io::read_file(m.path, out)
                        : io::read_range(m.path, m.offset, static_cast<uint64_t>(m.length), out);
}

std::string member_list(const Sample& s) {
  std::string names;
  for (const auto& m : s.members) names += (names.empty() ? "" : ", ") + m.name;
  return names.empty() ? "none" : names;
}

std::string preview(const std::string& s) {
  std::string p = s.substr(0, 40);
  for (auto& c : p) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return p + (s.size() > 40 ? "..." : "");
}

std::vector<Output> outputs_of(const FieldSpec& f) {
  std::vector<Output> out = f.field->outputs();
  if (f.optional) out.push_back({".present", OutputType::kBool, {}});
  return out;
}

void validate(const std::vector<FieldSpec>& fields) {
  if (fields.empty()) throw ConfigError("fields: at least one field is needed");
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& f = fields[i];
    for (size_t j = 0; j < i; ++j) {
      if (fields[j].name == f.name) throw ConfigError("fields: duplicate name '" + f.name + "'");
    }
    if (f.keys.empty()) throw ConfigError("field '" + f.name + "': no member keys");
    if (!f.field) throw ConfigError("field '" + f.name + "': no kind");
    f.field->validate(f.name);
  }
}

FieldProcessor::FieldProcessor(std::vector<FieldSpec> fields) : fields_(std::move(fields)) {
  validate(fields_);
  int strings = 0;
  for (const auto& f : fields_) {
    FieldSlots slots;
    slots.outputs = outputs_of(f);
    // A suffix names one output, or one record whose entries all carry distinct keys.
    for (size_t a = 0; a < slots.outputs.size(); ++a) {
      for (size_t b = 0; b < a; ++b) {
        const Output &x = slots.outputs[a], &y = slots.outputs[b];
        if (x.suffix == y.suffix && (x.key.empty() || y.key.empty() || x.key == y.key)) {
          throw std::logic_error("field '" + f.name + "': output '" + f.name + x.suffix +
                                 "' declared twice");
        }
      }
    }
    for (const Output& o : slots.outputs) {
      if (o.fixed()) {
        slots.at.push_back(static_cast<int>(fixed_bytes_.size()));
        slots.fixed.push_back(slots.at.back());
        fixed_bytes_.push_back(o.bytes_per_sample());
      } else {
        slots.at.push_back(strings++);
        slots.strings.push_back(slots.at.back());
      }
    }
    slots_.push_back(std::move(slots));
  }
  num_strings_ = static_cast<size_t>(strings);
  // A field that follows another (audio aligned to a video's clip) runs after it, whatever the
  // order the fields were given in; only one level deep: what it follows must be a video field.
  follows_.assign(fields_.size(), -1);
  for (size_t i = 0; i < fields_.size(); ++i) {
    const std::string target = fields_[i].field->follows();
    if (target.empty()) continue;
    const FieldSpec& f = fields_[i];
    for (size_t j = 0; j < fields_.size(); ++j) {
      if (fields_[j].name == target && fields_[j].field->clips() > 0)
        follows_[i] = static_cast<int>(j);
    }
    if (follows_[i] < 0) {
      throw ConfigError("field '" + f.name + "': align='" + target +
                        "' must name a VideoClip field of this loader");
    }
    const FieldSpec& v = fields_[static_cast<size_t>(follows_[i])];
    if (v.field->clips() != 1) {
      throw ConfigError("field '" + f.name + "': align= follows one clip; field '" + v.name +
                        "' has clips=" + std::to_string(v.field->clips()));
    }
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (follows_[i] < 0) order_.push_back(i);
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (follows_[i] >= 0) order_.push_back(i);
  }
}

std::vector<size_t> FieldProcessor::fixed_bytes_per_sample() const {
  return fixed_bytes_;
}

namespace {

telemetry::Stage stage_of(FailureKind k) {
  return k == FailureKind::kRead     ? telemetry::Stage::kRead
         : k == FailureKind::kDecode ? telemetry::Stage::kDecode
                                     : telemetry::Stage::kCollate;
}

uint8_t* slot_ptr(Batch& batch, int fixed, int slot) {
  return batch.fixed_data(static_cast<size_t>(fixed)) +
         static_cast<size_t>(slot) *
             batch.layout->fixed[static_cast<size_t>(fixed)].bytes_per_sample;
}

// The bytes of members read here (not by a kind's decoder), per thread.
std::string& file_buffer() {
  thread_local std::string s;
  return s;
}

}  // namespace

void FieldProcessor::process(Sample& sample, Batch& batch, int slot, SampleContext& ctx) {
  telemetry::Telemetry* t = ctx.telemetry;
  size_t i = 0;
  std::vector<ClipSpan> spans(fields_.size());  // video fields' clips, for aligned audio
  try {
    for (const size_t k : order_) {
      i = k;
      process_field(i, sample, batch, slot, ctx, spans);
    }
  } catch (const SampleError& e) {
    if (t) t->fail(*ctx.slot, stage_of(e.kind()), fields_[i].field->kind());
    throw;
  }
  if (t) {
    // Each kind's thread-local scratch once, however many fields share it.
    size_t bytes = file_buffer().capacity();
    std::set<std::type_index> seen;
    for (const auto& f : fields_) {
      const Field& kind = *f.field;
      if (seen.insert(std::type_index(typeid(kind))).second) bytes += kind.scratch_bytes();
    }
    ctx.slot->scratch_bytes.store(bytes, std::memory_order_relaxed);
  }
}

FieldProcessor::~FieldProcessor() = default;

void FieldProcessor::prepare(std::vector<Sample>& samples, const std::atomic<bool>& stop,
                             int64_t stride) {
  std::vector<Member*> remote_members;
  for (Sample& sample : samples) {
    for (const FieldSpec& f : fields_) {
      for (const auto& key : f.keys) {
        Member* m = nullptr;
        for (auto& candidate : sample.members) {
          if (candidate.name == key) {
            m = &candidate;  // the first, as process_field takes it
            break;
          }
        }
        if (m == nullptr) continue;
        // Whole remote videos are read by the decoder, a range at a time, as it seeks.
        const bool decoder_reads = f.field->reads_by_path() && m->whole_file();
        const bool listed =
            std::find(remote_members.begin(), remote_members.end(), m) != remote_members.end();
        if (m->is_path && !decoder_reads && !listed && io::is_remote(m->path))
          remote_members.push_back(m);
        break;
      }
    }
  }
  if (remote_members.empty()) return;
  std::lock_guard<std::mutex> lock(prefetcher_mutex_);
  if (prefetcher_ && prefetcher_pid_ != ::getpid()) {
    // Made before a fork: this process (a DataLoader worker) has none of its threads. Leaked,
    // not destroyed: its destructor would join threads that do not exist here.
    (void)prefetcher_.release();
  }
  if (!prefetcher_) {
    prefetcher_ = io::Prefetcher::from_environment();
    prefetcher_pid_ = ::getpid();
  }
  // The first batch of a run (an epoch's start, a resume) fetches its own members only: reading
  // whole blocks of every shard in the shuffle window first would delay it (by 40 MB for the
  // demo set); the blocks follow from the second batch on.
  const bool dense = stride == 1 && batches_in_run_++ > 0;
  prefetcher_->fetch(remote_members, stop, dense);
}

void FieldProcessor::cancel() {
  std::lock_guard<std::mutex> lock(prefetcher_mutex_);
  batches_in_run_ = 0;  // the run is over: the next one starts with spans again
  if (prefetcher_ && prefetcher_pid_ == ::getpid()) prefetcher_->cancel();
}

void FieldProcessor::process_field(size_t i, Sample& sample, Batch& batch, int slot,
                                   SampleContext& ctx, std::vector<ClipSpan>& spans) {
  const FieldSpec& f = fields_[i];
  const FieldSlots& out = slots_[i];
  const Field& kind = *f.field;
  auto clear = [&] {  // zeros everywhere (presence 0 included), empty strings
    for (int fx : out.fixed) {
      std::memset(slot_ptr(batch, fx, slot), 0, batch.layout->fixed[fx].bytes_per_sample);
    }
    for (int st : out.strings) batch.strings[st][slot].clear();
  };
  const Member* m = nullptr;
  for (const auto& key : f.keys) {
    if ((m = sample.find(key)) != nullptr) break;
  }
  if (m == nullptr) {
    if (f.optional) return clear();
    std::string wanted;
    for (const auto& k : f.keys) wanted += (wanted.empty() ? "" : ";") + k;
    throw SampleError(sample.key,
                      "no member '" + wanted + "' for field '" + f.name +
                          "' (sample has: " + member_list(sample) + ")",
                      FailureKind::kField);
  }
  const std::string* bytes = &m->data;
  // Whole files a kind opens by path itself (FFmpeg reads only what it needs) are not read
  // here; a byte range (an indexed tar member) is read here for them too.
  if (m->is_path && (!kind.reads_by_path() || !m->whole_file())) {
    telemetry::StageTimer timer(ctx.telemetry, ctx.slot, telemetry::Stage::kRead, kind.kind());
    try {
      const uint64_t n = read_member(*m, file_buffer());
      ctx.bytes_read += n;
      timer.add_bytes(n);
    } catch (const ReadFailure& e) {
      throw SampleError(m->whole_file() ? io::remote::redact(m->path) : sample.key, e.what(),
                        FailureKind::kRead);
    }
    bytes = &file_buffer();
  }
  FieldCall call{*m,
                 *bytes,
                 sample,
                 ctx,
                 f.name,
                 i,
                 {},
                 {},
                 spans,
                 follows_[i],
                 m->whole_file() ? io::remote::redact(m->path) : sample.key,
                 f.optional};
  const size_t own = out.outputs.size() - (f.optional ? 1 : 0);  // the kind's, not ".present"
  for (size_t k = 0; k < own; ++k) {
    if (out.outputs[k].fixed()) {
      call.fixed.push_back(slot_ptr(batch, out.at[k], slot));
    } else {
      call.strings.push_back(&batch.strings[static_cast<size_t>(out.at[k])][slot]);
    }
  }
  try {
    kind.fill(call);
  } catch (const DecodeFailure& e) {
    throw SampleError(call.where, m->name + ": " + e.what(), FailureKind::kDecode);
  } catch (const ReadFailure& e) {
    throw SampleError(call.where, e.what(), FailureKind::kRead);
  }
  if (call.absent) {
    if (!f.optional) throw std::logic_error("field '" + f.name + "': absent but not optional");
    return clear();
  }
  if (f.optional) *slot_ptr(batch, out.fixed.back(), slot) = 1;
}

}  // namespace loadscope::pipeline
