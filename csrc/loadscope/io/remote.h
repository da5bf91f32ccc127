#pragma once
// Objects in S3 (s3://bucket/key) and on HTTP(S) servers, read with libcurl.
//
// Every read is a GET of a byte range (or of the whole object), retried as object stores ask:
// exponential backoff with full jitter on 5xx, 429 and network failures; a body cut short is
// resumed with Range from the last byte received, pinned to the first answer's ETag (If-Match),
// so a retry never delivers bytes twice or bytes of a different object. A request that
// receives nothing for `stall_seconds` counts as failed. When the attempts run out, a
// ReadFailure names the URL, the HTTP status and the server's error code.
//
// S3 requests are signed with SigV4 (libcurl's CURLOPT_AWS_SIGV4) from the standard places:
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else AWS_PROFILE (default
// "default") in AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, else unsigned (public
// buckets). Region: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1. AWS_ENDPOINT_URL (or
// AWS_ENDPOINT_URL_S3) names an S3-compatible server, addressed path-style
// (endpoint/bucket/key); without it, AWS's virtual-host style. Errors name the credentials'
// source, never the secret.
//
// One curl handle per thread keeps its connections alive between requests, so connections per
// host are bounded by the threads that read. Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/telemetry/histogram.h"

namespace loadscope::io::remote {

// A request the server answered with an error (after retries): its status and, for S3, the
// error code of its body ("NoSuchKey", "AccessDenied", ...).
class HttpError : public ReadFailure {
 public:
  HttpError(const std::string& message, long status, std::string code)
      : ReadFailure(message), status_(status), code_(std::move(code)) {}
  long status() const { return status_; }
  const std::string& code() const { return code_; }

 private:
  long status_;
  std::string code_;
};

// True for s3://, http:// and https:// names.
bool is_url(const std::string& name);

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes included; empty if none
};

// HEAD. Throws ReadFailure (404, 403, network) naming the URL.
ObjectInfo stat(const std::string& url);

// Bytes [offset, offset + length) of the object (length < 0: to its end) into `out`.
// `etag` non-empty: the object must still have it (If-Match); a changed object is a
// ReadFailure saying so. Returns the bytes read.
// upto: the object may end before offset + length; fewer bytes are then returned (a block of
// a shard read ahead, whose size the caller does not know).
uint64_t get(const std::string& url, uint64_t offset, int64_t length, std::string& out,
             const std::string& etag = "", bool upto = false);

// Makes every later get() of `url` require `etag` (If-Match): the shard an index describes must
// stay the object that was indexed, for the whole run. An empty etag unpins.
void pin_etag(const std::string& url, const std::string& etag);

// PUT of a whole object (an index written next to its shard). Throws ReadFailure.
void put(const std::string& url, const std::string& data);
// PUT of a local file, read as it is sent. To S3, a file larger than Options::part_size goes
// up as a multipart upload (a single PUT is capped at 5 GB, and a failed part is sent again
// alone); a failed upload is aborted (best effort: a killed process leaves its parts, which a
// bucket lifecycle rule for incomplete uploads removes).
void put_file(const std::string& url, const std::string& path);

// The keys under an s3:// prefix (ListObjectsV2, every page), as s3:// URLs, sorted.
std::vector<std::string> list(const std::string& s3_prefix);

// The URL with userinfo and query string cut ("https://h/p?X-Amz-Signature=..." ->
// "https://h/p?..."): what errors, logs and telemetry may show. Local paths are returned as
// they are.
std::string redact(const std::string& url);

// Settings, read from the environment once (docs/remote.md); tests change them with configure().
struct Options {
  int max_attempts = 8;       // LOADSCOPE_REMOTE_ATTEMPTS
  double backoff_base = 0.1;  // seconds; attempt k waits uniform(0, min(cap, base * 2^k))
  double backoff_cap = 5.0;
  double connect_timeout = 10.0;  // seconds
  double stall_seconds = 30.0;    // LOADSCOPE_REMOTE_STALL: no byte for this long = failed
  // LOADSCOPE_CA_BUNDLE, CURL_CA_BUNDLE or AWS_CA_BUNDLE; where none is set and libcurl's own
  // default is missing, SSL_CERT_FILE or another distribution's bundle (Note [the CA bundle ...]).
  std::string ca_bundle;
  bool ca_bundle_set = false;  // given by configure(): reload_environment() keeps it
  bool retry_set = false;      // attempts, backoff, stall, timeout given by configure(): kept too
  bool verify_tls = true;
  int connections = 16;  // LOADSCOPE_REMOTE_CONNECTIONS: the fetch pool (prefetch.h)
  uint64_t inflight = uint64_t{256} << 20;  // LOADSCOPE_REMOTE_INFLIGHT: bytes fetched ahead
  // LOADSCOPE_REMOTE_PART_SIZE: put_file sends a larger file to S3 in parts of this size (at
  // least 5 MiB, S3's minimum; more when 10000 parts would not hold the file).
  uint64_t part_size = uint64_t{64} << 20;
};
Options options();
void configure(const Options& opts);

// The settings of a remote storage other than the process's (loadscope.Remote): what is given
// replaces the process's setting, what is not (empty, or < 0) is the process's at make_profile().
struct ProfileSettings {
  std::string endpoint;          // an S3-compatible server, addressed path-style
  std::string region;            // signing region
  std::string profile;           // a section of the shared credentials file
  std::string credentials_file;  // that file (default: AWS_SHARED_CREDENTIALS_FILE, ~/.aws/...)
  bool anonymous = false;        // unsigned requests (public buckets)
  int max_attempts = -1;
  double stall_seconds = -1, connect_timeout = -1;
  std::string ca_bundle;
};
struct Profile;  // the options and credentials requests use (remote_internal.h)
// Reads the credentials `s` names now; throws ConfigError for a profile that is not there.
std::shared_ptr<const Profile> make_profile(const ProfileSettings& s);
// Where a profile's credentials come from, for messages (no secret).
std::string credentials_source(const Profile& p);
// The calling thread's requests use `p` (nullptr: the process's settings) while it lives.
class ProfileScope {
 public:
  explicit ProfileScope(const Profile* p);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const Profile* previous_;
};

// Re-reads credentials, region, endpoint and the LOADSCOPE_REMOTE_* settings from the
// environment. They are read once otherwise (worker threads never call getenv); the Python
// layer calls this when it builds a source or a loader, from its own thread.
void reload_environment();

// Where the S3 credentials come from, for errors and the environment record (no secret).
std::string credentials_source();
// libcurl as loaded, with its TLS library: "7.88.1 (OpenSSL/3.0.19)", for the environment record.
std::string library_version();
// The endpoint as "scheme://host[:port]" and the region, for the environment record.
std::string s3_endpoint();
std::string s3_region();

// A flag the calling thread's requests watch: when it is set, a transfer in progress is aborted
// and no retry starts (ReadFailure "cancelled"). The prefetch pool sets it per task so that a
// stopped loader does not wait out a dead server's timeouts. nullptr: none.
void set_thread_cancel_flag(const std::atomic<bool>* flag);

// Process-wide counters of the network stage, read by telemetry.
struct Stats {
  uint64_t requests = 0, bytes = 0, failures = 0;
  uint64_t retries_server = 0;             // 5xx and 429 answers retried
  uint64_t retries_network = 0;            // connect/reset/stall retried
  uint64_t resumed = 0;                    // bodies cut short and resumed with Range
  uint64_t busy_ns = 0;                    // summed request time
  telemetry::HistogramData first_byte_ns;  // time to first byte, per request
  telemetry::HistogramData request_ns;     // whole request, per request
};
Stats stats();
void reset_stats();

}  // namespace loadscope::io::remote
