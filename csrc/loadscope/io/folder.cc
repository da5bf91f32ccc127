#include "loadscope/io/folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <tbb/parallel_for.h>
#include <tbb/task_group.h>

#include "loadscope/core/error.h"
#include "loadscope/core/parallel.h"

namespace loadscope::io {

namespace {

std::string join(const std::string& a, const std::string& b) {  // os.path.join for a relative b
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

struct Listing {
  std::vector<std::string> dirs,
      files;  // os.walk's split: dirs are what is_dir() says (links followed)
};

// One directory, as os.scandir + DirEntry.is_dir() see it; false when it cannot be read (os.walk
// skips such directories silently).
bool list_dir(const std::string& path, Listing& out, std::pair<dev_t, ino_t>* id) {
  DIR* d = opendir(path.empty() ? "." : path.c_str());
  if (!d) return false;
  if (id) {
    struct stat st {};
    if (fstat(dirfd(d), &st) == 0) *id = {st.st_dev, st.st_ino};
  }
  while (dirent* e = readdir(d)) {
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir = stat(join(path, n).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    (is_dir ? out.dirs : out.files).emplace_back(n);
  }
  closedir(d);
  return true;
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool has_extension(const std::string& name, const std::vector<std::string>& exts) {
  for (const auto& x : exts) {
    if (name.size() < x.size()) continue;
    bool same = true;
    for (size_t i = 0; i < x.size() && same; ++i) {
      char c = name[name.size() - x.size() + i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      same = c == x[i];
    }
    if (same) return true;
  }
  return false;
}

std::string stem(const std::string& name) {  // os.path.splitext(name)[0] of a file name
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return name;
  size_t first = 0;  // leading dots do not start an extension
  while (first < dot && name[first] == '.') ++first;
  return first == dot ? name : name.substr(0, dot);
}

// Walks directories in parallel (oneTBB tasks: listing a directory is mostly the kernel's
// time, which two cores halve), then adds the samples in ImageFolder's order.
class Scanner {
 public:
  Scanner(const std::vector<std::string>& exts, TableBuilder& b, Array<int64_t>* labels)
      : exts_(exts), b_(b), labels_(labels) {}

  // The samples under each top directory, in order; labels[i] < 0: none.
  void scan(const std::vector<std::string>& tops, const std::vector<int64_t>& labels) {
    run_parallel([&] {
      tbb::task_group group;
      for (size_t i = 0; i < tops.size(); ++i) {
        group.run([this, &group, &tops, i] { walk(group, tops[i], {}, i); });
      }
      group.wait();
      // sorted(os.walk(top)) orders by path; then the files of each directory by name.
      std::sort(walked_.begin(), walked_.end(), [](const Walked& x, const Walked& y) {
        return x.top != y.top ? x.top < y.top : x.dir < y.dir;
      });
      tbb::parallel_for(size_t{0}, walked_.size(), [this](size_t i) {
        std::sort(walked_[i].files.begin(), walked_[i].files.end());
      });
    });
    for (auto& w : walked_) add_dir(w.dir, w.files, labels[w.top]);
  }

  int64_t ignored = 0;

 private:
  struct Walked {
    size_t top;
    std::string dir;
    std::vector<std::string> files;
  };

  // os.walk(top, followlinks=True), except that a directory that is its own ancestor (a link
  // back up the tree) is not entered again: os.walk would recurse until the path is too long.
  void walk(tbb::task_group& group, const std::string& dir,
            std::vector<std::pair<dev_t, ino_t>> ancestors, size_t top) {
    Listing l;
    std::pair<dev_t, ino_t> id{0, 0};
    if (!list_dir(dir, l, &id)) return;
    if (std::find(ancestors.begin(), ancestors.end(), id) != ancestors.end()) return;
    ancestors.push_back(id);
    for (const auto& d : l.dirs) {
      group.run(
          [this, &group, sub = join(dir, d), ancestors, top] { walk(group, sub, ancestors, top); });
    }
    std::lock_guard<std::mutex> lock(mu_);
    walked_.push_back(Walked{top, dir, std::move(l.files)});
  }

  void add_dir(const std::string& dir, std::vector<std::string>& files, int64_t label) {
    std::sort(files.begin(), files.end());
    std::vector<const std::string*> images;
    std::map<std::string, std::vector<const std::string*>> sidecars;  // stem -> other files, sorted
    for (const auto& f : files) {
      if (has_extension(f, exts_)) {
        images.push_back(&f);
      } else {
        sidecars[stem(f)].push_back(&f);
      }
    }
    if (images.empty()) {
      ignored += static_cast<int64_t>(files.size());
      return;
    }
    const uint32_t prefix = static_cast<uint32_t>(b_.prefixes.size());
    b_.prefixes.push_back(join(dir, ""));
    std::set<const std::string*> attached;
    for (const std::string* img : images) {
      const uint32_t row = static_cast<uint32_t>(b_.path_ends.size());
      b_.add_path(img->data(), img->size());
      b_.prefix.push_back(prefix);
      auto it = sidecars.find(stem(*img));
      if (it != sidecars.end()) {
        for (const std::string* s : it->second) {
          if (label >= 0 && member_name(s->data(), s->size()) == "cls") {
            throw ConfigError(
                "Folder: " + join(dir, stem(*img)) +
                ".cls clashes with the class label taken from the subfolder; use labels='none'");
          }
          attached.insert(s);
          b_.extra_rows.push_back(row);
          TableBuilder::append(b_.extra_text, s->data(), s->size());
          b_.extra_ends.push_back(b_.extra_text.size());
        }
      }
      if (labels_) labels_->push_back(label);
    }
    ignored += static_cast<int64_t>(files.size() - images.size() - attached.size());
  }

  const std::vector<std::string>& exts_;
  TableBuilder& b_;
  Array<int64_t>* labels_;
  std::mutex mu_;
  std::vector<Walked> walked_;
};

}  // namespace

FolderScan scan_folder(const std::string& root, const std::vector<std::string>& extensions,
                       const std::string& labels) {
  if (labels != "auto" && labels != "subfolders" && labels != "none") {
    throw ConfigError("Folder(labels='" + labels + "'): allowed are 'auto', 'subfolders', 'none'");
  }
  Listing top;
  struct stat st {};
  if (stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !list_dir(root, top, nullptr)) {
    throw ConfigError("Folder: '" + root + "' is not a directory");
  }
  std::sort(top.dirs.begin(), top.dirs.end());
  FolderScan out;
  out.labels = labels;
  if (labels == "auto") {
    bool has_files = false;
    for (const auto& f : top.files) {
      if (has_extension(f, extensions) && is_regular(join(root, f))) {
        has_files = true;
        break;
      }
    }
    out.labels = !top.dirs.empty() && !has_files ? "subfolders" : "none";
  }
  TableBuilder b;
  b.prefixes.clear();
  Array<int64_t> label_of;
  Scanner scanner(extensions, b, out.labels == "subfolders" ? &label_of : nullptr);
  std::vector<std::string> tops;
  std::vector<int64_t> labels_of_tops;
  if (out.labels == "subfolders") {
    out.classes = top.dirs;
    for (size_t i = 0; i < out.classes.size(); ++i) {
      tops.push_back(join(root, out.classes[i]));
      labels_of_tops.push_back(static_cast<int64_t>(i));
    }
  } else {
    tops.push_back(root);
    labels_of_tops.push_back(-1);
  }
  scanner.scan(tops, labels_of_tops);
  out.ignored_files = scanner.ignored;
  if (b.path_ends.empty()) {
    std::string exts;
    for (const auto& e : extensions) exts += (exts.empty() ? "" : ", ") + e;
    throw ConfigError("Folder: no samples under '" + root + "' (looked for files ending in " +
                      exts + ")");
  }
  if (b.path_ends.size() > UINT32_MAX)
    throw ConfigError("Folder: more than 2^32 files under '" + root + "'");
  if (b.prefixes.size() == 1) b.prefix.clear();  // one directory: no per-row index
  if (!label_of.empty()) {
    TableBuilder::Col cls;
    cls.member = "cls";
    cls.is_int = true;
    cls.ints = std::move(label_of);
    b.columns.push_back(std::move(cls));
  }
  out.table = TableBuilder::finish(std::move(b));
  return out;
}

}  // namespace loadscope::io
