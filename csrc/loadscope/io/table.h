#pragma once
// Samples listed up front — a manifest's rows (manifest.h) or a folder's files (folder.h) —
// kept as columns instead of one object per sample: every row's path in one byte arena with an
// end offset per row, integer columns as int64 arrays, text columns as arena + offsets. A row
// becomes a Sample (key, members) only when the planner hands it out. For a manifest of
// {"path", "cls"} that is 16 bytes per row plus the path's own bytes, and a SampleTable read
// back from its cache file (manifest.h) points straight into the mapped file.
//
// A row's key and its file member are prefix + path, where the prefix is the manifest's root
// or the folder's directory (one of `prefixes`). Absolute paths and URLs stand alone; under a
// URL root, leading slashes of a path are dropped, as FileList always did.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loadscope/core/permutation.h"
#include "loadscope/core/source.h"
#include "loadscope/io/storage.h"

namespace loadscope::io {

// A vector whose resize() leaves numbers uninitialised: the parser sizes its arrays first and
// fills them from several threads, and zeroing 500 MB first would cost a pass on one core.
template <typename T>
struct NoInit : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = NoInit<U>;
  };
  NoInit() = default;
  template <typename U>
  NoInit(const NoInit<U>&) noexcept {}  // NOLINT: rebinding
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
template <typename T>
using Array = std::vector<T, NoInit<T>>;

// A read-only array that lives in an Array the table owns or in a mapped cache file.
template <typename T>
struct View {
  const T* data = nullptr;
  size_t size = 0;
  View() = default;
  View(const T* d, size_t n) : data(d), size(n) {}
  template <typename A>
  View(const std::vector<T, A>& v) : data(v.data()), size(v.size()) {}  // NOLINT: a view of v
  const T& operator[](size_t i) const { return data[i]; }
  bool empty() const { return size == 0; }
};

// Strings of one column: row i's bytes are text[ends[i-1] .. ends[i]).
struct Strings {
  View<uint64_t> ends;
  View<char> text;
  std::string at(size_t i) const {
    const uint64_t b = i ? ends[i - 1] : 0;
    return std::string(text.data + b, ends[i] - b);
  }
  size_t length(size_t i) const { return ends[i] - (i ? ends[i - 1] : 0); }
  const char* begin(size_t i) const { return text.data + (i ? ends[i - 1] : 0); }
};

struct Column {
  std::string member;   // the member's name (the manifest's column name, lower-case)
  bool is_int = false;  // every present value was an integer written as Python writes it
  View<int64_t> ints;   // is_int
  Strings strings;      // !is_int
  View<uint64_t>
      absent;  // bit i set: row i has no value (a JSON line without the key); may be empty
  bool present(size_t i) const { return absent.empty() || !((absent[i >> 6] >> (i & 63)) & 1); }
};

// Extra files of a row (a folder image's sidecars: a.txt beside a.jpg), one entry per file,
// sorted by row: the few rows that have them cost nothing to the others.
struct Extras {
  View<uint32_t> rows;
  Strings names;
};

class SampleTable {
 public:
  enum class Join : uint8_t { kLocal, kUrl };

  int64_t rows() const { return static_cast<int64_t>(paths.ends.size); }
  // Row i as the pipeline takes it: key = the file's path; members = the file (named by its
  // extension), the row's extras, then the columns it has.
  void sample(size_t row, Sample& out) const;
  std::string path(size_t row) const;  // the joined path, which is the key
  // Bytes held per row (the arrays, not the mapping's page cache): what a user sizes memory by.
  uint64_t bytes() const;
  // A hash of the keys, in order: two tables with the same digest list the same files.
  uint64_t digest() const;

  std::vector<std::string> prefixes;  // one (a root) or a folder's directories, each ending in '/'
  View<uint32_t> prefix;              // row -> prefixes index; empty: prefixes[0] for every row
  Join join = Join::kLocal;
  // "+r1f2e3d4c5": put after the scheme of rows that are s3/http(s) URLs, so that they are read
  // with the settings the manifest was named with (loadscope.Remote; storage.h). Not saved.
  std::string scheme_tag;
  Strings paths;
  Extras extras;
  std::vector<Column> columns;
  // What the views point into: the builder's vectors, or a mapped cache file.
  std::shared_ptr<const void> storage;
};

// The file-name extension as os.path.splitext takes it (the last dot of the last component,
// not a leading one), lower-cased without the dot; empty when there is none.
std::string member_name(const char* path, size_t n);

// Owns the vectors of a table being built; finish() moves them behind the views.
struct TableBuilder {
  std::vector<std::string> prefixes;
  Array<uint32_t> prefix;
  SampleTable::Join join = SampleTable::Join::kLocal;
  Array<uint64_t> path_ends;
  Array<char> path_text;
  Array<uint32_t> extra_rows;
  Array<uint64_t> extra_ends;
  Array<char> extra_text;
  struct Col {
    std::string member;
    bool is_int = false;
    Array<int64_t> ints;
    Array<uint64_t> ends;
    Array<char> text;
    Array<uint64_t> absent;
  };
  std::vector<Col> columns;

  static void append(Array<char>& to, const char* p, size_t n) { to.insert(to.end(), p, p + n); }
  void add_path(const char* p, size_t n) {
    append(path_text, p, n);
    path_ends.push_back(path_text.size());
  }
  static std::shared_ptr<const SampleTable> finish(TableBuilder&& b);
};

// A table of files named one by one, in that order: a dataset's own list of (path, label),
// cut, filtered or reordered as it may be. `paths` holds them separated by '\0' (no file name
// contains one); `labels`, when `n_labels` is not 0, one integer per path, kept as the int member
// `member`. A row's key is its path as given (relative paths are the process's to resolve, as
// for the dataset itself). ConfigError for an empty path or a count that does not match.
std::shared_ptr<const SampleTable> table_of_files(std::string_view paths, const int64_t* labels,
                                                  size_t n_labels, const std::string& member);

// The first row at which two tables give another key or another value of the member `member`
// (absent counts as a value); the shorter one's row count when all of its rows agree but the
// other lists more; -1 when they list the same samples. What says that a folder's scan is
// exactly a dataset's list, so the cheaper source can stand for it.
int64_t first_difference(const SampleTable& a, const SampleTable& b, const std::string& member);

// A source over a table: a shuffled epoch is a Permutation, so starting one, skipping to a
// resume position and handing out row k cost O(1) whatever the table's size.
class TableSource : public Source {
 public:
  explicit TableSource(std::shared_ptr<const SampleTable> table);
  int64_t size() const override { return table_->rows(); }
  void start_epoch(const EpochOrder& order) override;
  bool next(Sample& out) override;
  int64_t skip(int64_t n) override;

 private:
  std::shared_ptr<const SampleTable> table_;
  Permutation order_;
  uint64_t cursor_ = 0;
};

}  // namespace loadscope::io
