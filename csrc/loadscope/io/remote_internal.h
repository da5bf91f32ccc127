#pragma once
// What the parts of the remote client share (remote_settings.cc: settings, credentials and URLs;
// remote_transfer.cc: one request, retries, reads; remote_upload.cc: uploads and listing).
// Internal to io/: the interface is remote.h.

#include <curl/curl.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "loadscope/io/remote.h"

namespace loadscope::io::remote::detail {

// ---- settings, credentials, URLs (remote_settings.cc) ----------------------------------------

std::string env(const char* name);
bool starts_with(const std::string& s, const char* prefix);
// RFC 3986 unreserved characters stay, everything else is %XX; '/' too unless keep_slash.
// SigV4 signs the path exactly as sent, so keys are encoded once, here, and curl sends them as is.
std::string percent_encode(const std::string& s, bool keep_slash);
// The options in force (the environment's, or what configure() set).
Options current_options();

struct Credentials {
  std::string key, secret, token, source;
};

// What the environment says, read at once and kept: worker threads never call getenv, which
// races with Python's os.environ assignments (putenv). reload_environment() re-reads it from
// the thread that builds a loader.
struct Environment {
  Credentials cred;
  std::string region, endpoint;
};
std::shared_ptr<const Environment> environment();
}  // namespace loadscope::io::remote::detail

namespace loadscope::io::remote {
struct Profile {
  Options options;
  std::shared_ptr<const detail::Environment> environment;
};
}  // namespace loadscope::io::remote

namespace loadscope::io::remote::detail {

struct Target {
  std::string http_url;  // what curl requests
  bool s3 = false;
  std::string bucket, key;
};
// s3://bucket/key -> the request URL: path-style on a configured endpoint, else AWS's
// virtual-host style. http(s) URLs pass through. Throws ReadFailure for other names.
Target target(const std::string& url);

// ---- one request (remote_transfer.cc) --------------------------------------------------------

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

// What a PUT sends: bytes in memory, or a file read as curl asks (a shard is not held whole).
struct Upload {
  const std::string* data = nullptr;
  std::FILE* file = nullptr;
  uint64_t offset = 0;  // of the file: where this upload (a part) starts
  uint64_t size = 0;
  size_t at = 0;
};

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

// One attempt, signed for S3 when there are credentials; counted in stats().
Response perform(const Request& req, std::string* sink);
// Performs `req` again while it fails in a way worth retrying and attempts remain (stat, put,
// list; get resumes bodies and has a loop of its own). `before_attempt` resets what an attempt
// consumed (an upload's position, a body). Returns the last answer, succeeded or not.
Response retrying(const Request& req, std::string* sink,
                  const std::function<void()>& before_attempt = nullptr);
bool succeeded(const Response& r);
// The error for a failed request: "GET s3://b/k bytes=0-: HTTP 503 SlowDown: ... (after 8
// attempts)"; an HttpError when the server answered, so that callers can tell 404 from 403.
[[noreturn]] void fail(const std::string& what, const Response& r, const std::string& url);
// The text of an XML element (the first <tag>), entities decoded; "" when absent.
std::string xml_field(const std::string& xml, const std::string& tag);

}  // namespace loadscope::io::remote::detail
