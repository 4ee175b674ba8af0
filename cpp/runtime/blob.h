// The bytes of an embedded blob (registry.h) as a driver loads them. Blobs are stored
// zlib-compressed when that is smaller (build_tools/blob.py); such a blob is inflated into a
// buffer owned by a BlobImage, right before cuModuleLoadData / hipModuleLoadData, and freed with
// it after the load (the driver keeps its own copy of a loaded image).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "registry.h"

namespace tileaot::detail {

class BlobImage {
 public:
  enum Status {
    kOk,
    kOutOfMemory,  // no buffer for the inflated image
    kCorrupt,      // the zlib stream does not inflate to the recorded size: a damaged library
  };

  // Makes data() the image of `blob`: the blob itself, or its inflated copy. On failure,
  // `detail` says what went wrong (for the message after the blob's arch).
  Status open(const Blob& blob, std::string* detail);

  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const;
  };
  std::unique_ptr<unsigned char, Free> buffer_;
  const void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tileaot::detail
