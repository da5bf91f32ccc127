#include "loadscope/io/remote.h"

#include <curl/curl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"

namespace loadscope::io::remote {

namespace {

// ---- settings and counters ---------------------------------------------------------------

constexpr uint64_t kMinPartSize = uint64_t{5} << 20;  // S3: every part but the last
constexpr uint64_t kMaxParts = 10000;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

double env_number(const char* name, double fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(d >= 0)) {
    throw ConfigError(std::string(name) + "=" + v + ": expected a number >= 0");
  }
  return d;
}

bool nonempty_file(const char* path) {
  struct stat st {};
  return path != nullptr && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

// Note [the CA bundle of a carried libcurl]
// libcurl looks for trusted certificates where the distribution that built it keeps them: the
// wheel carries Debian's, which looks in /etc/ssl/certs/ca-certificates.crt. On RHEL, Fedora,
// SUSE or Alpine that file does not exist and every https:// request would fail to verify. So
// when libcurl's own default is not there, use SSL_CERT_FILE (OpenSSL's variable, which conda
// and many clusters set), else the first of the other distributions' bundles that exists.
// Empty: libcurl's default, as before.
std::string fallback_ca_bundle() {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  if (info->cainfo == nullptr || nonempty_file(info->cainfo)) return {};
  const std::string from_env = env("SSL_CERT_FILE");
  if (nonempty_file(from_env.c_str())) return from_env;
  for (const char* path : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                           "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
                           "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"}) {
    if (nonempty_file(path)) return path;
  }
  return {};
}

Options from_environment() {
  Options o;
  o.max_attempts =
      std::max(1, static_cast<int>(env_number("LOADSCOPE_REMOTE_ATTEMPTS", o.max_attempts)));
  o.stall_seconds = env_number("LOADSCOPE_REMOTE_STALL", o.stall_seconds);
  const double connections = env_number("LOADSCOPE_REMOTE_CONNECTIONS", o.connections);
  if (connections < 1 || connections > 256)
    throw ConfigError("LOADSCOPE_REMOTE_CONNECTIONS: 1 to 256");
  o.connections = static_cast<int>(connections);
  const double inflight = env_number("LOADSCOPE_REMOTE_INFLIGHT", static_cast<double>(o.inflight));
  if (inflight < 1) throw ConfigError("LOADSCOPE_REMOTE_INFLIGHT: bytes, at least 1");
  o.inflight = static_cast<uint64_t>(inflight);
  const double part = env_number("LOADSCOPE_REMOTE_PART_SIZE", static_cast<double>(o.part_size));
  if (part < kMinPartSize)
    throw ConfigError("LOADSCOPE_REMOTE_PART_SIZE: bytes, at least 5 MiB (S3's minimum)");
  o.part_size = static_cast<uint64_t>(part);
  for (const char* name : {"LOADSCOPE_CA_BUNDLE", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE"}) {
    if (!env(name).empty()) {
      o.ca_bundle = env(name);
      break;
    }
  }
  if (o.ca_bundle.empty()) o.ca_bundle = fallback_ca_bundle();
  return o;
}

std::mutex g_options_mutex;
std::unique_ptr<Options> g_options;
// What configure() was given, field group by field group: a reload keeps it.
struct Configured {
  bool retry = false;  // max_attempts, backoff, stall_seconds, connect_timeout
  Options values;
  bool ca = false;
  std::string ca_bundle;
};
Configured g_configured;

Options current_options() {
  std::lock_guard<std::mutex> lock(g_options_mutex);
  if (!g_options) g_options = std::make_unique<Options>(from_environment());
  return *g_options;
}

std::atomic<uint64_t> g_requests{0}, g_bytes{0}, g_failures{0}, g_retries_server{0},
    g_retries_network{0}, g_resumed{0}, g_busy_ns{0};
std::mutex g_hist_mutex;  // requests take milliseconds: one lock per request costs nothing
auto g_first_byte = std::make_unique<telemetry::Histogram>();
auto g_request = std::make_unique<telemetry::Histogram>();

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// ---- URLs ------------------------------------------------------------------------------------

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// RFC 3986 unreserved characters stay, everything else is %XX; '/' too unless keep_slash.
// SigV4 signs the path exactly as sent, so keys are encoded once, here, and curl sends them as is.
std::string percent_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

struct Credentials {
  std::string key, secret, token, source;
};

// An access key id shown in errors and records: enough to tell keys apart, not the whole id.
std::string masked(const std::string& key) {
  return key.size() <= 8 ? std::string(key.size(), '*') : "..." + key.substr(key.size() - 6);
}

// ~/.aws/credentials (or AWS_SHARED_CREDENTIALS_FILE): the [profile] section's keys.
bool profile_credentials(Credentials& out) {
  std::string profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::string path = env("AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty() && !env("HOME").empty()) path = env("HOME") + "/.aws/credentials";
  std::ifstream f(path);
  if (!f) return false;
  std::string line, section;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    const auto e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(f, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    if (section != profile) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (k == "aws_access_key_id") out.key = v;
    if (k == "aws_secret_access_key") out.secret = v;
    if (k == "aws_session_token") out.token = v;
  }
  out.source = "profile '" + profile + "' in " + path;
  return !out.key.empty() && !out.secret.empty();
}

// Read per request (a few getenv calls, nothing next to a network round trip), so credentials
// rotated in the environment take effect without a restart.
Credentials read_credentials() {
  Credentials c;
  c.key = env("AWS_ACCESS_KEY_ID");
  c.secret = env("AWS_SECRET_ACCESS_KEY");
  if (!c.key.empty() && !c.secret.empty()) {
    c.token = env("AWS_SESSION_TOKEN");
    c.source = "environment (AWS_ACCESS_KEY_ID " + masked(c.key) + ")";
    return c;
  }
  Credentials p;
  if (profile_credentials(p)) {
    p.source += " (key " + masked(p.key) + ")";
    return p;
  }
  return Credentials{"", "", "", "none (unsigned requests: no AWS_ACCESS_KEY_ID, no profile)"};
}

std::string read_region() {
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (!env(name).empty()) return env(name);
  }
  return "us-east-1";
}

std::string read_endpoint() {
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    std::string e = env(name);
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (!e.empty()) return e;
  }
  return "";
}

// What the environment says, read at once and kept: worker threads never call getenv, which
// races with Python's os.environ assignments (putenv). reload_environment() re-reads it from
// the thread that builds a loader.
struct Environment {
  Credentials cred;
  std::string region, endpoint;
};
std::mutex g_env_mutex;
std::shared_ptr<const Environment> g_env;

std::shared_ptr<const Environment> load_environment() {
  auto e = std::make_shared<Environment>();
  e->cred = read_credentials();
  e->region = read_region();
  e->endpoint = read_endpoint();
  return e;
}

std::shared_ptr<const Environment> environment() {
  std::lock_guard<std::mutex> lock(g_env_mutex);
  if (!g_env) g_env = load_environment();
  return g_env;
}

struct Target {
  std::string http_url;  // what curl requests
  bool s3 = false;
  std::string bucket, key;
};

// s3://bucket/key -> the request URL: path-style on a configured endpoint, else AWS's
// virtual-host style. http(s) URLs pass through.
Target target(const std::string& url) {
  Target t;
  if (!starts_with(url, "s3://")) {
    if (!starts_with(url, "http://") && !starts_with(url, "https://")) {
      throw ReadFailure(url + ": not an s3://, http:// or https:// URL");
    }
    t.http_url = url;
    return t;
  }
  t.s3 = true;
  const std::string rest = url.substr(5);
  const auto slash = rest.find('/');
  t.bucket = rest.substr(0, slash);
  t.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (t.bucket.empty()) throw ReadFailure(url + ": no bucket");
  const auto env = environment();
  if (!env->endpoint.empty()) {
    t.http_url = env->endpoint + "/" + t.bucket + "/" + percent_encode(t.key, true);
  } else if (t.bucket.find('.') != std::string::npos) {
    // A dotted bucket name would not match AWS's wildcard certificate as a host name.
    t.http_url = "https://s3." + env->region + ".amazonaws.com/" + t.bucket + "/" +
                 percent_encode(t.key, true);
  } else {
    t.http_url = "https://" + t.bucket + ".s3." + env->region + ".amazonaws.com/" +
                 percent_encode(t.key, true);
  }
  return t;
}

// ---- one request -----------------------------------------------------------------------------

thread_local const std::atomic<bool>* t_cancel = nullptr;

bool cancelled() {
  return t_cancel != nullptr && t_cancel->load(std::memory_order_relaxed);
}

int on_progress(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return cancelled() ? 1 : 0;
}

struct Easy {
  CURL* h = nullptr;
  pid_t pid = ::getpid();
  Easy() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    h = curl_easy_init();
    if (!h) throw ReadFailure("curl_easy_init failed");
  }
  ~Easy() { curl_easy_cleanup(h); }
};

// One handle per thread: curl_easy_reset keeps its connection cache, so consecutive requests
// of a thread reuse a kept-alive connection (TLS handshakes included).
CURL* thread_handle() {
  thread_local std::unique_ptr<Easy> easy;
  if (easy && easy->pid != ::getpid()) {
    // A forked child (a DataLoader worker): the kept-alive sockets are the parent's too, and
    // two processes reading one connection would take each other's responses. Leaked, not
    // cleaned up: cleanup would talk on those sockets.
    (void)easy.release();
  }
  if (!easy) easy = std::make_unique<Easy>();
  curl_easy_reset(easy->h);
  return easy->h;
}

struct Response {
  CURL* handle = nullptr;
  int attempts = 1;
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string etag;
  std::string error_body;   // a non-2xx answer's body (the S3 error XML), capped
  uint64_t received = 0;    // body bytes delivered to the sink
  uint64_t skip = 0;        // leading bytes still to drop
  bool ranged = false;      // a Range was asked for
  uint64_t range_from = 0;  // its first byte
  int64_t want = -1;        // bytes wanted, -1: all
  int64_t content_length = -1;
  bool too_large = false;
  bool complete = false;  // the body was cut by us once `want` bytes had arrived
  std::string* sink = nullptr;
  uint64_t first_byte_ns = 0;
  char curl_error[CURL_ERROR_SIZE] = {0};
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  std::string line(data, size * n);
  if (starts_with(line, "HTTP/")) {  // a new response (after a 100 Continue or a redirect)
    r->etag.clear();
    r->content_length = -1;
  }
  const auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    std::string value = line.substr(colon + 1);
    const auto b = value.find_first_not_of(" \t");
    const auto e = value.find_last_not_of(" \t\r\n");
    value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
    if (name == "etag") r->etag = value;
    if (name == "content-length") r->content_length = std::strtoll(value.c_str(), nullptr, 10);
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const size_t bytes = size * n;
  if (r->first_byte_ns == 0) r->first_byte_ns = now_ns();
  if (r->status == 0) {
    curl_easy_getinfo(r->handle, CURLINFO_RESPONSE_CODE, &r->status);
    // A 200 to a ranged request is the whole object (a server without Range support):
    // the bytes before the range are dropped, those after it ignored.
    if (r->status == 200 && r->ranged) r->skip = r->range_from;
  }
  if (r->status < 200 || r->status >= 300) {
    if (r->error_body.size() < 16384) r->error_body.append(data, std::min<size_t>(bytes, 16384));
    return bytes;
  }
  size_t from = 0;
  if (r->skip > 0) {
    from = static_cast<size_t>(std::min<uint64_t>(r->skip, bytes));
    r->skip -= from;
  }
  size_t take = bytes - from;
  if (r->want >= 0) {
    take =
        static_cast<size_t>(std::min<uint64_t>(take, static_cast<uint64_t>(r->want) - r->received));
    if (take == 0 && r->skip == 0) {  // all we asked for (from a server that sends more): stop here
      r->complete = true;
      return 0;
    }
  }
  if (r->sink->size() + take > kMaxMemberBytes) {
    r->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  r->sink->append(data + from, take);
  r->received += take;
  return bytes;
}

// What a PUT sends: bytes in memory, or a file read as curl asks (a shard is not held whole).
struct Upload {
  const std::string* data = nullptr;
  std::FILE* file = nullptr;
  uint64_t offset = 0;  // of the file: where this upload (a part) starts
  uint64_t size = 0;
  size_t at = 0;
};

// curl rewinds an upload it must send again within one attempt (a kept-alive connection that
// turned out dead, a 417 to Expect): back to `offset` bytes into this upload.
int on_upload_seek(void* user, curl_off_t offset, int origin) {
  auto* u = static_cast<Upload*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > u->size)
    return CURL_SEEKFUNC_FAIL;
  if (u->file && ::fseeko(u->file, static_cast<off_t>(u->offset + static_cast<uint64_t>(offset)),
                          SEEK_SET) != 0) {
    return CURL_SEEKFUNC_FAIL;
  }
  u->at = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t on_upload(char* dst, size_t size, size_t n, void* user) {
  auto* u = static_cast<Upload*>(user);
  if (u->file) {  // at most what is left of this upload: a part ends before the file does
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size * n, u->size - u->at));
    const size_t got = std::fread(dst, 1, want, u->file);
    u->at += got;
    return std::ferror(u->file) ? CURL_READFUNC_ABORT : got;
  }
  const size_t take = std::min(size * n, u->data->size() - u->at);
  std::memcpy(dst, u->data->data() + u->at, take);
  u->at += take;
  return take;
}

struct Request {
  const char* method = "GET";  // GET, HEAD, PUT, POST (with `body`), DELETE
  std::string url;             // as given (s3:// or http(s)://)
  std::string query;           // already sorted and encoded (SigV4 signs it as sent)
  bool ranged = false;         // with a Range header from `from`
  uint64_t from = 0;
  int64_t length = -1;  // bytes wanted from `from`, -1: to the end
  std::string if_match;
  Upload* upload = nullptr;
  std::string body;  // POST
};

Response perform(const Request& req, std::string* sink) {
  const Options opts = current_options();
  const Target t = target(req.url);
  CURL* h = thread_handle();
  Response r;
  r.handle = h;
  r.sink = sink;
  r.ranged = req.ranged;
  r.range_from = req.from;
  r.want = req.length;
  const std::string full = t.http_url + (req.query.empty() ? "" : "?" + req.query);
  curl_easy_setopt(h, CURLOPT_URL, full.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // worker threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r.curl_error);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts.connect_timeout * 1000));
  if (opts.stall_seconds > 0) {  // no byte for stall_seconds: the transfer failed, retry it
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, static_cast<long>(opts.stall_seconds)));
  }
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &on_progress);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, opts.verify_tls ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, opts.verify_tls ? 2L : 0L);
  if (!opts.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, opts.ca_bundle.c_str());
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, t.s3 ? 0L : 1L);  // a signed request must not wander
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  const std::string method(req.method);
  if (method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, &on_upload);
    curl_easy_setopt(h, CURLOPT_READDATA, req.upload);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &on_upload_seek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, req.upload);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.upload->size));
  } else if (method == "POST") {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (method == "DELETE") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  struct curl_slist* headers = nullptr;
  auto add = [&](const std::string& hdr) { headers = curl_slist_append(headers, hdr.c_str()); };
  if (req.ranged) {
    add("Range: bytes=" + std::to_string(req.from) + "-" +
        (req.length >= 0 ? std::to_string(req.from + static_cast<uint64_t>(req.length) - 1) : ""));
  }
  if (!req.if_match.empty()) add("If-Match: " + req.if_match);
  Credentials cred;
  std::string sigv4;
  if (t.s3) {
    const auto env = environment();
    cred = env->cred;
    // The key as given: curl would resolve "a/../b" to another key (and sign that one).
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (!cred.key.empty()) {
      // curl 7.88 neither adds x-amz-content-sha256 (S3 answers 403 without it) nor derives
      // the scope from an IP address: both given explicitly (REMOTE-NOTES).
      sigv4 = "aws:amz:" + env->region + ":s3";
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERNAME, cred.key.c_str());
      curl_easy_setopt(h, CURLOPT_PASSWORD, cred.secret.c_str());
      add("x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!cred.token.empty()) add("x-amz-security-token: " + cred.token);
    }
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  const uint64_t start = now_ns();
  r.code = curl_easy_perform(h);
  const uint64_t end = now_ns();
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(headers);
  // Nothing of the request may outlive it in the handle: the secret above all.
  curl_easy_setopt(h, CURLOPT_USERNAME, nullptr);
  curl_easy_setopt(h, CURLOPT_PASSWORD, nullptr);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  g_requests.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(r.received, std::memory_order_relaxed);
  g_busy_ns.fetch_add(end - start, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(g_hist_mutex);
    g_request->record(end - start);
    if (r.first_byte_ns) g_first_byte->record(r.first_byte_ns - start);
  }
  return r;
}

std::string xml_field(const std::string& xml, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const auto b = xml.find(open);
  if (b == std::string::npos) return "";
  const auto e = xml.find(close, b);
  if (e == std::string::npos) return "";
  std::string v = xml.substr(b + open.size(), e - b - open.size());
  // The five XML entities (keys with & or < come back escaped).
  static const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities) {
    for (size_t at = v.find(from); at != std::string::npos; at = v.find(from, at + 1)) {
      v.replace(at, std::strlen(from), to);
    }
  }
  return v;
}

bool retryable_status(long status, const std::string& body) {
  return status >= 500 || status == 429 ||
         (status == 400 && xml_field(body, "Code") == "RequestTimeout");
}

bool retryable_code(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return true;
    default: return false;
  }
}

// "HTTP 404 NoSuchKey: The specified key does not exist." or the curl error.
std::string describe(const Response& r, const Target& t) {
  if (r.code != CURLE_OK && r.code != CURLE_WRITE_ERROR) {
    return std::string(curl_easy_strerror(r.code)) +
           (r.curl_error[0] ? std::string(" (") + r.curl_error + ")" : "");
  }
  std::string s = "HTTP " + std::to_string(r.status);
  const std::string code = xml_field(r.error_body, "Code"),
                    message = xml_field(r.error_body, "Message");
  if (!code.empty()) s += " " + code;
  if (!message.empty()) s += ": " + message;
  if (t.s3 && (r.status == 403 || r.status == 401))
    s += " (credentials: " + environment()->cred.source + ")";
  if (t.s3 && r.status == 404 && code.empty()) s += " (no such bucket or key)";
  return s;
}

void backoff(int attempt, const Options& opts) {
  if (cancelled()) return;
  thread_local std::mt19937_64 gen{std::random_device{}()};
  const double ceiling = std::min(opts.backoff_cap, opts.backoff_base * std::pow(2.0, attempt));
  std::uniform_real_distribution<double> wait(0.0, ceiling);  // "full jitter" (AWS)
  std::this_thread::sleep_for(std::chrono::duration<double>(wait(gen)));
}

bool succeeded(const Response& r) {
  return r.code == CURLE_OK && r.status >= 200 && r.status < 300;
}

// Performs `req` again while it fails in a way worth retrying and attempts remain (stat, put,
// list; get resumes bodies and has a loop of its own). `before_attempt` resets what an attempt
// consumed (an upload's position, a body). Returns the last answer, succeeded or not.
Response retrying(const Request& req, std::string* sink,
                  const std::function<void()>& before_attempt = nullptr) {
  const Options opts = current_options();
  for (int attempt = 0;; ++attempt) {
    if (before_attempt) before_attempt();
    Response r = perform(req, sink);
    r.attempts = attempt + 1;
    if (succeeded(r)) return r;
    const bool network = r.code != CURLE_OK;
    const bool retry = network ? retryable_code(r.code) : retryable_status(r.status, r.error_body);
    if (!retry || attempt + 1 >= opts.max_attempts || cancelled()) {
      g_failures.fetch_add(1, std::memory_order_relaxed);
      return r;
    }
    (network ? g_retries_network : g_retries_server).fetch_add(1, std::memory_order_relaxed);
    backoff(attempt, opts);
  }
}

// The error for a failed request: "GET s3://b/k bytes=0-: HTTP 503 SlowDown: ... (after 8
// attempts)"; an HttpError when the server answered, so that callers can tell 404 from 403.
[[noreturn]] void fail(const std::string& what, const Response& r, const std::string& url) {
  const std::string message =
      what + ": " + describe(r, target(url)) +
      (r.attempts > 1 ? " (after " + std::to_string(r.attempts) + " attempts)" : "");
  if (r.status >= 300 && (r.code == CURLE_OK || r.code == CURLE_WRITE_ERROR)) {
    throw HttpError(message, r.status, xml_field(r.error_body, "Code"));
  }
  throw ReadFailure(message);
}

std::mutex g_pins_mutex;
std::map<std::string, std::string> g_pins;  // url -> ETag the epoch's reads must see

}  // namespace

bool is_url(const std::string& name) {
  return starts_with(name, "s3://") || starts_with(name, "http://") ||
         starts_with(name, "https://");
}

std::string redact(const std::string& url) {
  if (!is_url(url)) return url;  // a local path may contain '?' or '@'
  std::string out = url;
  const auto scheme = out.find("://");
  if (scheme != std::string::npos) {
    const auto host_end = out.find('/', scheme + 3);
    const auto at = out.rfind('@', host_end == std::string::npos ? std::string::npos : host_end);
    if (at != std::string::npos && at > scheme)
      out = out.substr(0, scheme + 3) + "***@" + out.substr(at + 1);
  }
  const auto q = out.find('?');
  if (q != std::string::npos) out = out.substr(0, q) + "?...";
  return out;
}

Options options() {
  return current_options();
}

void set_thread_cancel_flag(const std::atomic<bool>* flag) {
  t_cancel = flag;
}

void configure(const Options& opts) {
  if (opts.max_attempts < 1 || !(opts.backoff_base >= 0) || !(opts.backoff_cap >= 0) ||
      !(opts.stall_seconds >= 0) || !(opts.connect_timeout > 0)) {
    throw ConfigError(
        "remote options: max_attempts >= 1, backoff and stall seconds >= 0, connect_timeout > 0");
  }
  std::lock_guard<std::mutex> lock(g_options_mutex);
  g_options = std::make_unique<Options>(opts);
  if (opts.retry_set) {
    g_configured.retry = true;
    g_configured.values = opts;
  }
  if (opts.ca_bundle_set) {
    g_configured.ca = true;
    g_configured.ca_bundle = opts.ca_bundle;
  }
}

void reload_environment() {
  auto e = load_environment();
  Options o = from_environment();
  {
    std::lock_guard<std::mutex> lock(g_env_mutex);
    g_env = std::move(e);
  }
  std::lock_guard<std::mutex> lock(g_options_mutex);
  // What configure() set outlasts a reload (every loader makes one), except a variable the
  // environment sets explicitly at this reload. Taking the environment's defaults instead
  // silently cut a test's 30 attempts back to 8.
  if (g_configured.retry) {
    const Options& c = g_configured.values;
    o.backoff_base = c.backoff_base;
    o.backoff_cap = c.backoff_cap;
    o.connect_timeout = c.connect_timeout;
    if (env("LOADSCOPE_REMOTE_ATTEMPTS").empty()) o.max_attempts = c.max_attempts;
    if (env("LOADSCOPE_REMOTE_STALL").empty()) o.stall_seconds = c.stall_seconds;
  }
  if (g_configured.ca) {
    o.ca_bundle = g_configured.ca_bundle;
    o.ca_bundle_set = true;
  }
  g_options = std::make_unique<Options>(o);
}

std::string credentials_source() {
  return environment()->cred.source;
}
std::string library_version() {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  std::string v = info->version;
  if (info->ssl_version != nullptr) v += std::string(" (") + info->ssl_version + ")";
  return v;
}

std::string s3_region() {
  return environment()->region;
}
std::string s3_endpoint() {
  const auto env = environment();
  return env->endpoint.empty() ? "https://s3." + env->region + ".amazonaws.com"
                               : redact(env->endpoint);
}

ObjectInfo stat(const std::string& url) {
  Request req;
  req.method = "HEAD";
  req.url = url;
  std::string sink;
  Response r = retrying(req, &sink);
  if (succeeded(r)) {
    if (r.content_length < 0)
      throw ReadFailure(redact(url) + ": the server did not say the object's size");
    return ObjectInfo{static_cast<uint64_t>(r.content_length), r.etag};
  }
  if ((r.status == 404 || r.status == 403) && target(url).s3) {
    // A HEAD answer has no body, so no error code: NoSuchKey and NoSuchBucket look alike, and
    // so do AccessDenied and SignatureDoesNotMatch. A one-byte GET says which (failures only).
    Request probe;
    probe.url = url;
    probe.ranged = true;
    probe.length = 1;
    std::string ignored;
    const Response p = perform(probe, &ignored);
    if (p.status == r.status) r.error_body = p.error_body;
  }
  fail("HEAD " + redact(url), r, url);
}

uint64_t get(const std::string& url, uint64_t offset, int64_t length, std::string& out,
             const std::string& etag, bool upto) {
  const Options opts = current_options();
  if (length >= 0) check_member_size(static_cast<uint64_t>(length));
  std::string pinned = etag;
  if (pinned.empty()) {
    std::lock_guard<std::mutex> lock(g_pins_mutex);
    auto it = g_pins.find(url);
    if (it != g_pins.end()) pinned = it->second;
  }
  out.clear();
  if (length == 0) return 0;
  if (length > 0) out.reserve(static_cast<size_t>(length));
  for (int attempt = 0;; ++attempt) {
    const uint64_t before = out.size();
    Request req;
    req.url = url;
    // A weak ETag (W/"...") never matches If-Match, which compares strongly (RFC 9110): such
    // objects are read unpinned.
    req.if_match = pinned.rfind("W/", 0) == 0 ? "" : pinned;
    req.ranged = offset > 0 || length >= 0 || before > 0;
    req.from = offset + before;
    req.length = length >= 0 ? length - static_cast<int64_t>(before) : -1;
    Response r = perform(req, &out);
    if (r.complete) r.code = CURLE_OK;
    const uint64_t received = out.size();
    if (cancelled()) throw ReadFailure("GET " + redact(url) + ": cancelled (the loader stopped)");
    if (r.too_large) {
      g_failures.fetch_add(1, std::memory_order_relaxed);
      check_member_size(received + kMaxMemberBytes);  // throws the usual message
    }
    const bool ok_status = r.status >= 200 && r.status < 300;
    if (ok_status && pinned.empty()) pinned = r.etag;  // a resumed body must be the same object
    if (r.code == CURLE_OK && ok_status &&
        (length < 0 || received == static_cast<uint64_t>(length) || upto)) {
      return received;  // (upto: a complete answer may be shorter, at the object's end)
    }
    const std::string range = req.ranged ? " bytes=" + std::to_string(req.from) + "-" : "";
    if (r.status == 412) {
      g_failures.fetch_add(1, std::memory_order_relaxed);
      throw HttpError(redact(url) + " changed while it was being read (its ETag is no longer " +
                          pinned + "): re-index it or restart the epoch",
                      412, "PreconditionFailed");
    }
    if (r.status == 416) {
      g_failures.fetch_add(1, std::memory_order_relaxed);
      throw HttpError("GET " + redact(url) + range +
                          ": HTTP 416, the object is shorter than the range "
                          "(it changed after it was indexed?)",
                      416, "InvalidRange");
    }
    // A 2xx whose body ended early is a cut connection: resumed from the last byte received.
    const bool network = r.code != CURLE_OK || ok_status;
    const bool retry = network ? (r.code == CURLE_OK || retryable_code(r.code))
                               : retryable_status(r.status, r.error_body);
    if (retry && received > before) {
      // Progress: resume at once, and the attempts start over (a body is finite, so this
      // ends; a connection that is cut every few MB still delivers a large range).
      g_retries_network.fetch_add(1, std::memory_order_relaxed);
      g_resumed.fetch_add(1, std::memory_order_relaxed);
      attempt = -1;
      continue;
    }
    if (retry && attempt + 1 < opts.max_attempts) {
      (network ? g_retries_network : g_retries_server).fetch_add(1, std::memory_order_relaxed);
      backoff(attempt, opts);
      continue;
    }
    g_failures.fetch_add(1, std::memory_order_relaxed);
    r.attempts = attempt + 1;
    fail("GET " + redact(url) + range, r, url);
  }
}

namespace {
Response put_upload(const std::string& url, Upload& up, const std::string& query = "",
                    const std::string& what = "") {
  Request req;
  req.method = "PUT";
  req.url = url;
  req.query = query;
  req.upload = &up;
  std::string sink;
  const Response r = retrying(req, &sink, [&] {
    up.at = 0;  // every attempt sends from the start
    if (up.file && ::fseeko(up.file, static_cast<off_t>(up.offset), SEEK_SET) != 0) {
      throw ReadFailure(redact(url) +
                        ": cannot seek in the file being sent: " + std::strerror(errno));
    }
  });
  if (!succeeded(r)) fail("PUT " + redact(url) + what, r, url);
  return r;
}

// A POST whose answer is XML (multipart upload). S3 may answer CompleteMultipartUpload with
// 200 and an <Error> in the body, after it has started: that is a failure too.
std::string post_xml(const std::string& url, const std::string& query, const std::string& body) {
  Request req;
  req.method = "POST";
  req.url = url;
  req.query = query;
  req.body = body;
  std::string answer;
  const Response r = retrying(req, &answer, [&] { answer.clear(); });
  if (!succeeded(r)) fail("POST " + redact(url), r, url);
  if (answer.find("<Error>") != std::string::npos) {
    throw HttpError("POST " + redact(url) + ": " + xml_field(answer, "Code") + ": " +
                        xml_field(answer, "Message"),
                    r.status, xml_field(answer, "Code"));
  }
  return answer;
}

// S3's multipart upload: initiate, parts in order, complete; abort on any failure.
void put_parts(const std::string& url, std::FILE* file, uint64_t size, uint64_t part_size) {
  part_size = std::max(part_size, (size + kMaxParts - 1) / kMaxParts);
  const std::string id = xml_field(post_xml(url, "uploads=", ""), "UploadId");
  if (id.empty()) throw ReadFailure("POST " + redact(url) + ": the server gave no UploadId");
  const std::string upload_id = "uploadId=" + percent_encode(id, false);
  try {
    std::string complete = "<CompleteMultipartUpload>";
    for (uint64_t at = 0, number = 1; at < size; at += part_size, ++number) {
      Upload up;
      up.file = file;
      up.offset = at;
      up.size = std::min(part_size, size - at);
      // Parameters sorted, as curl 7.88 signs the query as sent: partNumber < uploadId.
      const std::string part = " (part " + std::to_string(number) + ")";
      const Response r =
          put_upload(url, up, "partNumber=" + std::to_string(number) + "&" + upload_id, part);
      if (r.etag.empty())
        throw ReadFailure("PUT " + redact(url) + part + ": the answer has no ETag");
      complete += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" + r.etag +
                  "</ETag></Part>";
    }
    try {
      post_xml(url, upload_id, complete + "</CompleteMultipartUpload>");
    } catch (const HttpError& e) {
      // A retried Complete whose first answer was lost finds the upload gone (NoSuchUpload):
      // the object is there if it has this file's size.
      if (e.code() != "NoSuchUpload" || stat(url).size != size) throw;
    }
  } catch (...) {
    try {  // best effort, and never in place of the error that matters (the one above)
      Request abort;
      abort.method = "DELETE";
      abort.url = url;
      abort.query = upload_id;
      std::string ignored;
      (void)retrying(abort, &ignored);
    } catch (...) {
    }
    throw;
  }
}
}  // namespace

void put(const std::string& url, const std::string& data) {
  Upload up;
  up.data = &data;
  up.size = data.size();
  put_upload(url, up);
}

void put_file(const std::string& url, const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw ReadFailure(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0)
    throw ReadFailure(path + ": cannot stat: " + std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t part_size = current_options().part_size;
  if (target(url).s3 && size > part_size) return put_parts(url, f.get(), size, part_size);
  Upload up;
  up.file = f.get();
  up.size = size;
  put_upload(url, up);
}

std::vector<std::string> list(const std::string& s3_prefix) {
  if (!starts_with(s3_prefix, "s3://"))
    throw ReadFailure(redact(s3_prefix) + ": listing needs an s3:// prefix");
  const std::string rest = s3_prefix.substr(5);
  const auto slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  std::vector<std::string> keys;
  std::string token;
  while (true) {
    // curl 7.88 signs the query as sent: parameters sorted and fully encoded here.
    Request req;
    req.url = "s3://" + bucket + "/";
    std::string q;
    if (!token.empty()) q += "continuation-token=" + percent_encode(token, false) + "&";
    q += "list-type=2&prefix=" + percent_encode(prefix, false);
    req.query = q;
    std::string body;
    const Response r = retrying(req, &body, [&] { body.clear(); });
    if (!succeeded(r)) fail("LIST " + redact(s3_prefix), r, req.url);
    for (size_t at = body.find("<Key>"); at != std::string::npos; at = body.find("<Key>", at + 5)) {
      keys.push_back("s3://" + bucket + "/" + xml_field(body.substr(at), "Key"));
    }
    if (xml_field(body, "IsTruncated") != "true") break;
    token = xml_field(body, "NextContinuationToken");
    if (token.empty()) break;
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

void pin_etag(const std::string& url, const std::string& etag) {
  std::lock_guard<std::mutex> lock(g_pins_mutex);
  if (etag.empty()) {
    g_pins.erase(url);
  } else {
    g_pins[url] = etag;
  }
}

Stats stats() {
  Stats s;
  s.requests = g_requests.load(std::memory_order_relaxed);
  s.bytes = g_bytes.load(std::memory_order_relaxed);
  s.failures = g_failures.load(std::memory_order_relaxed);
  s.retries_server = g_retries_server.load(std::memory_order_relaxed);
  s.retries_network = g_retries_network.load(std::memory_order_relaxed);
  s.resumed = g_resumed.load(std::memory_order_relaxed);
  s.busy_ns = g_busy_ns.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_hist_mutex);
  s.first_byte_ns = g_first_byte->data();
  s.request_ns = g_request->data();
  return s;
}

void reset_stats() {
  for (auto* a : {&g_requests, &g_bytes, &g_failures, &g_retries_server, &g_retries_network,
                  &g_resumed, &g_busy_ns}) {
    a->store(0, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lock(g_hist_mutex);
  g_first_byte = std::make_unique<telemetry::Histogram>();
  g_request = std::make_unique<telemetry::Histogram>();
}

}  // namespace loadscope::io::remote
