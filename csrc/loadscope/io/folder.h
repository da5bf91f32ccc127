#pragma once
// A folder of files scanned into a SampleTable (table.h), sample for sample like torchvision's
// ImageFolder: every file whose name ends in one of the extensions is a sample, in
// ImageFolder's order (classes by sorted name, then the directories of os.walk(followlinks=True)
// sorted by path, then file names sorted), with the class index of its top-level subfolder.
// Names sort by bytes, which is Python's order for UTF-8 names.
//
// Other files sharing an image's name up to its last dot are attached to it as members
// (a.jpg + a.txt), as Folder always did. A directory that links back to one above it is not
// entered again (os.walk would recurse until the path is too long).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/io/table.h"

namespace loadscope::io {

struct FolderScan {
  std::shared_ptr<const SampleTable> table;
  std::string labels;                // "subfolders" or "none" ("auto" decided)
  std::vector<std::string> classes;  // with "subfolders": the class names by index
  int64_t ignored_files = 0;         // files that are neither a sample nor attached to one
};

// labels: "auto" (subfolders when the root has subdirectories and no sample files of its own),
// "subfolders" or "none". extensions: lower-case, each starting with a dot. Throws ConfigError
// (not a directory, no samples, a sidecar named .cls under class labels).
FolderScan scan_folder(const std::string& root, const std::vector<std::string>& extensions,
                       const std::string& labels);

}  // namespace loadscope::io
