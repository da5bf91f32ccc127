// Uploads (a PUT, or S3's multipart upload for a large file) and S3 listings.
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

constexpr uint64_t kMaxParts = 10000;  // S3's limit on the parts of one upload

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

}  // namespace loadscope::io::remote
