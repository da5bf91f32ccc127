// Object storage and HTTP (io/remote.h) and the node-local cache (io/cache.h). A failure is a
// ReadError naming the URL, redacted.
#include "loadscope/python/binding.h"

#include "loadscope/io/cache.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"

namespace loadscope::binding {

void register_remote(py::module_& m) {
  // A failure is a ReadError naming the URL, redacted.
  auto remote_call = [](const std::string& url, auto&& fn) {
    return naming(io::remote::redact(url), fn);
  };
  m.def("is_remote", &io::is_remote, py::arg("name"),
        "Whether `name` is read over the network: its scheme's storage is remote (io/storage.h).");
  m.def("storage_scheme", &io::scheme_of, py::arg("name"),
        "'s3' for 's3://b/k'; '' for a local path.");
  m.def("storage_schemes", &io::storage_schemes, "The schemes with a storage (io/storage.h).");
  m.def("redact_url", &io::remote::redact, py::arg("url"));
  m.def(
      "remote_stat",
      [remote_call](const std::string& url) {
        const auto info = remote_call(url, [&] {
          py::gil_scoped_release release;
          return io::storage_for(url).stat(url);
        });
        return py::make_tuple(info.size, info.version);
      },
      py::arg("url"), "HEAD: (size, etag).");
  m.def(
      "remote_probe",
      [remote_call](const std::string& url, bool absent_if_denied) -> py::object {
        io::ObjectInfo info;
        try {
          py::gil_scoped_release release;
          info = io::storage_for(url).stat(url);
        } catch (const io::remote::HttpError& e) {
          // Not there: a 404 of the key (a missing bucket is an error worth reporting), or a
          // 403 AccessDenied where the caller knows S3 hides missing keys from roles that may
          // not list the bucket.
          if ((e.status() == 404 && e.code() != "NoSuchBucket") ||
              (absent_if_denied && e.status() == 403 && e.code() == "AccessDenied")) {
            return py::none();
          }
          throw e.named(io::remote::redact(url));
        } catch (const ReadFailure& e) {
          throw e.named(io::remote::redact(url));
        }
        return py::make_tuple(info.size, info.version);
      },
      py::arg("url"), py::arg("absent_if_denied") = false,
      "HEAD: (size, etag), or None when the object does not exist; other failures are a "
      "ReadError.");
  m.def(
      "read_bytes",
      [remote_call](const std::string& path, uint64_t offset, int64_t length,
                    const std::string& etag) {
        if (length < 0 && offset != 0) throw ConfigError("read_bytes: an offset needs a length");
        std::string out;
        remote_call(path, [&] {
          py::gil_scoped_release release;
          if (!etag.empty())
            return io::storage_for(path).read(path, offset, length, out, etag, false);  // pinned
          return length < 0 ? io::read_file(path, out)
                            : io::read_range(path, offset, static_cast<uint64_t>(length), out);
        });
        return py::bytes(out);
      },
      py::arg("path"), py::arg("offset") = 0, py::arg("length") = -1, py::arg("etag") = "",
      "A whole file or object, or a byte range of it (a local path or a URL); etag: an object that "
      "no longer has it is an error.");
  m.def(
      "remote_profile",
      [](const std::string& tag, const std::string& endpoint, const std::string& region,
         const std::string& profile, const std::string& credentials_file, bool anonymous,
         int attempts, double stall_seconds, double connect_timeout, const std::string& ca_bundle,
         const std::string& cache_dir, uint64_t cache_limit) {
        io::remote::ProfileSettings s;
        s.endpoint = endpoint;
        s.region = region;
        s.profile = profile;
        s.credentials_file = credentials_file;
        s.anonymous = anonymous;
        s.max_attempts = attempts;
        s.stall_seconds = stall_seconds;
        s.connect_timeout = connect_timeout;
        s.ca_bundle = ca_bundle;
        const auto p = io::remote::make_profile(s);
        const io::cache::Settings cache{cache_dir, cache_limit};
        io::register_remote_profile(tag, p, cache_dir.empty() ? nullptr : &cache);
        return io::remote::credentials_source(*p);
      },
      py::arg("tag"), py::arg("endpoint"), py::arg("region"), py::arg("profile"),
      py::arg("credentials_file"), py::arg("anonymous"), py::arg("attempts"),
      py::arg("stall_seconds"), py::arg("connect_timeout"), py::arg("ca_bundle"),
      py::arg("cache_dir") = "", py::arg("cache_limit") = 0,
      "Registers the storages s3+<tag>://, http+<tag>://, https+<tag>:// with these settings "
      "over the process's (loadscope.Remote); returns where its credentials come from.");
  m.def("remote_reload_environment", &io::remote::reload_environment,
        "Re-reads AWS_* and LOADSCOPE_REMOTE_* (call from the thread that changes os.environ).");
  m.def(
      "remote_put_file",
      [remote_call](const std::string& url, const std::string& path) {
        remote_call(url, [&] {
          py::gil_scoped_release release;
          io::remote::put_file(url, path);
          return 0;
        });
      },
      py::arg("url"), py::arg("path"), "Uploads a local file (read as it is sent).");
  m.def(
      "remote_list",
      [remote_call](const std::string& prefix) {
        return remote_call(prefix, [&] {
          py::gil_scoped_release release;
          return io::remote::list(prefix);
        });
      },
      py::arg("prefix"), "The keys under an s3:// prefix, as sorted s3:// URLs.");
  m.def("remote_environment", [] {
    py::dict d;
    d["s3_endpoint"] = io::remote::s3_endpoint();
    d["s3_region"] = io::remote::s3_region();
    d["s3_credentials"] = io::remote::credentials_source();
    const auto o = io::remote::options();
    d["max_attempts"] = o.max_attempts;
    d["stall_seconds"] = o.stall_seconds;
    d["ca_bundle"] = o.ca_bundle;
    return d;
  });
  m.def(
      "remote_configure",
      [](int max_attempts, double backoff_base, double backoff_cap, double stall_seconds,
         double connect_timeout) {
        io::remote::Options o = io::remote::options();
        o.max_attempts = max_attempts;
        o.backoff_base = backoff_base;
        o.backoff_cap = backoff_cap;
        o.stall_seconds = stall_seconds;
        o.connect_timeout = connect_timeout;
        o.retry_set = true;
        io::remote::configure(o);
      },
      py::arg("max_attempts"), py::arg("backoff_base"), py::arg("backoff_cap"),
      py::arg("stall_seconds"), py::arg("connect_timeout"));
  m.def(
      "remote_configure_ca",
      [](const std::string& ca_bundle) {
        io::remote::Options o = io::remote::options();
        o.ca_bundle = ca_bundle;
        o.ca_bundle_set = true;
        io::remote::configure(o);
      },
      py::arg("ca_bundle"), "The CA bundle TLS peers are verified against (empty: the system's).");
  m.def("network_stats", [] {
    const io::remote::Stats st = io::remote::stats();
    py::dict d;
    d["requests"] = st.requests;
    d["bytes"] = st.bytes;
    d["failures"] = st.failures;
    d["retries_server"] = st.retries_server;
    d["retries_network"] = st.retries_network;
    d["resumed"] = st.resumed;
    d["busy_s"] = static_cast<double>(st.busy_ns) * 1e-9;
    const io::cache::Stats c = io::cache::stats();
    d["cache_hits"] = c.hits;
    d["cache_misses"] = c.misses;
    d["cache_evictions"] = c.evictions;
    d["cache_bytes_fetched"] = c.bytes_fetched;
    d["first_byte"] = histogram_dict(st.first_byte_ns, 1e-9);
    d["request"] = histogram_dict(st.request_ns, 1e-9);
    return d;
  });
  m.def("reset_network_stats", [] {
    io::remote::reset_stats();
    io::cache::reset_stats();
  });
  m.def(
      "remote_cache",
      [](const std::string& dir, uint64_t limit) {
        io::cache::configure(io::cache::Settings{dir, limit});
      },
      py::arg("dir"), py::arg("limit") = 0,
      "The node-local cache of remote objects (io/cache.h); dir='' turns it off. Process-wide.");
  m.def("remote_cache_settings", [] {
    const auto s = io::cache::settings();
    return py::make_tuple(s.dir, s.limit);
  });
}

}  // namespace loadscope::binding
