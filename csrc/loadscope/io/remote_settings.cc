// The remote client's settings (the environment's LOADSCOPE_REMOTE_*, or configure()),
// credentials, region and endpoint, and how a name becomes a request URL.
#include <curl/curl.h>
#include <sys/stat.h>

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

constexpr uint64_t kMinPartSize = uint64_t{5} << 20;  // S3: every part but the last

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

// An access key id shown in errors and records: enough to tell keys apart, not the whole id.
std::string masked(const std::string& key) {
  return key.size() <= 8 ? std::string(key.size(), '*') : "..." + key.substr(key.size() - 6);
}

// ~/.aws/credentials (or AWS_SHARED_CREDENTIALS_FILE, or `path`): the [profile] section's keys
// (AWS_PROFILE's, else "default", unless `profile` names one).
bool profile_credentials(Credentials& out, std::string profile = "", std::string path = "") {
  if (profile.empty()) profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  if (path.empty()) path = env("AWS_SHARED_CREDENTIALS_FILE");
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

std::mutex g_env_mutex;
std::shared_ptr<const Environment> g_env;

std::shared_ptr<const Environment> load_environment() {
  auto e = std::make_shared<Environment>();
  e->cred = read_credentials();
  e->region = read_region();
  e->endpoint = read_endpoint();
  return e;
}

}  // namespace

namespace detail {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

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

// The profile of the calling thread's requests (ProfileScope), else the process's settings.
thread_local const Profile* t_profile = nullptr;

Options current_options() {
  if (t_profile) return t_profile->options;
  std::lock_guard<std::mutex> lock(g_options_mutex);
  if (!g_options) g_options = std::make_unique<Options>(from_environment());
  return *g_options;
}

std::shared_ptr<const Environment> environment() {
  if (t_profile) return t_profile->environment;
  std::lock_guard<std::mutex> lock(g_env_mutex);
  if (!g_env) g_env = load_environment();
  return g_env;
}

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

}  // namespace detail

bool is_url(const std::string& name) {
  return starts_with(name, "s3://") || starts_with(name, "http://") ||
         starts_with(name, "https://");
}

std::string redact(const std::string& url) {
  // A name of a storage with settings of its own ("s3+r1f2e3d4c5://b/k", storage.h) is shown
  // as its user wrote it.
  const auto plus = url.find('+');
  const auto colon = url.find("://");
  if (plus != std::string::npos && colon != std::string::npos && plus < colon &&
      is_url(url.substr(0, plus) + url.substr(colon))) {
    return redact(url.substr(0, plus) + url.substr(colon));
  }
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

std::shared_ptr<const Profile> make_profile(const ProfileSettings& s) {
  auto p = std::make_shared<Profile>();
  p->options = current_options();
  if (s.max_attempts >= 1) p->options.max_attempts = s.max_attempts;
  if (s.stall_seconds >= 0) p->options.stall_seconds = s.stall_seconds;
  if (s.connect_timeout > 0) p->options.connect_timeout = s.connect_timeout;
  if (!s.ca_bundle.empty()) p->options.ca_bundle = s.ca_bundle;
  auto e = std::make_shared<Environment>(*environment());
  if (!s.endpoint.empty()) {
    e->endpoint = s.endpoint;
    while (!e->endpoint.empty() && e->endpoint.back() == '/') e->endpoint.pop_back();
  }
  if (!s.region.empty()) e->region = s.region;
  if (s.anonymous) {
    e->cred = Credentials{"", "", "", "none (anonymous=True: unsigned requests)"};
  } else if (!s.profile.empty() || !s.credentials_file.empty()) {
    Credentials c;
    if (!profile_credentials(c, s.profile, s.credentials_file)) {
      throw ConfigError("Remote: no access key and secret in " + c.source);
    }
    c.source += " (key " + masked(c.key) + ")";
    e->cred = c;
  }
  p->environment = std::move(e);
  return p;
}

std::string credentials_source(const Profile& p) {
  return p.environment->cred.source;
}

ProfileScope::ProfileScope(const Profile* p) : previous_(t_profile) {
  t_profile = p;
}
ProfileScope::~ProfileScope() {
  t_profile = previous_;
}

std::string s3_region() {
  return environment()->region;
}
std::string s3_endpoint() {
  const auto env = environment();
  return env->endpoint.empty() ? "https://s3." + env->region + ".amazonaws.com"
                               : redact(env->endpoint);
}

}  // namespace loadscope::io::remote
