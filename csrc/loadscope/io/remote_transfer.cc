// One request to S3 or an HTTP(S) server (libcurl, a handle per thread), retried as object
// stores ask; HEAD and ranged GETs; the counters of stats().
#include <curl/curl.h>
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
#include <string>
#include <thread>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote_internal.h"

namespace loadscope::io::remote {

using namespace detail;

namespace {

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

std::mutex g_pins_mutex;
std::map<std::string, std::string> g_pins;  // url -> ETag the epoch's reads must see

}  // namespace

namespace detail {

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

bool succeeded(const Response& r) {
  return r.code == CURLE_OK && r.status >= 200 && r.status < 300;
}

Response retrying(const Request& req, std::string* sink,
                  const std::function<void()>& before_attempt) {
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

[[noreturn]] void fail(const std::string& what, const Response& r, const std::string& url) {
  const std::string message =
      what + ": " + describe(r, target(url)) +
      (r.attempts > 1 ? " (after " + std::to_string(r.attempts) + " attempts)" : "");
  if (r.status >= 300 && (r.code == CURLE_OK || r.code == CURLE_WRITE_ERROR)) {
    throw HttpError(message, r.status, xml_field(r.error_body, "Code"));
  }
  throw ReadFailure(message);
}

}  // namespace detail

void set_thread_cancel_flag(const std::atomic<bool>* flag) {
  t_cancel = flag;
}

std::string library_version() {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  std::string v = info->version;
  if (info->ssl_version != nullptr) v += std::string(" (") + info->ssl_version + ")";
  return v;
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
