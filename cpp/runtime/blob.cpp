#include "blob.h"

#include <cstdint>
#include <new>

#if TILEAOT_HAVE_ZLIB
#include <zlib.h>
#endif

namespace tileaot::detail {
namespace {

// blobs.S embeds the blob file's header, a little-endian u64, byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "blob headers are little-endian");

// A cubin is a few MiB at most: a larger recorded size is a damaged header, not an allocation.
constexpr uint64_t kMaxInflatedSize = uint64_t{1} << 30;
// As blobs.S aligns embedded images: drivers read ELF headers in place.
constexpr std::align_val_t kAlign{64};

#if TILEAOT_HAVE_ZLIB
// Inflates the blob's zlib stream into `out`, which must fill exactly `size` bytes with the
// whole stream used; otherwise says why in `detail`.
BlobImage::Status inflate_exactly(const Blob& blob, unsigned char* out, uint64_t size,
                                  std::string* detail) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) {
    *detail = "zlib had no memory to inflate it";
    return BlobImage::kOutOfMemory;
  }
  z.next_in = const_cast<unsigned char*>(blob.data);  // not const unless ZLIB_CONST; only read
  z.avail_in = static_cast<uInt>(blob.size);          // both below kMaxInflatedSize
  z.next_out = out;
  z.avail_out = static_cast<uInt>(size);
  const int rc = inflate(&z, Z_FINISH);
  const bool ended = rc == Z_STREAM_END;
  const bool stopped = rc == Z_OK || rc == Z_BUF_ERROR;  // needs more input or more room
  const std::string recorded = std::to_string(size);
  std::string why;
  if (ended && z.avail_out != 0) {
    why = "it inflates to " + std::to_string(z.total_out) + " bytes, not its recorded " + recorded;
  } else if (ended && z.avail_in != 0) {
    why = std::to_string(z.avail_in) + " bytes follow its zlib stream";
  } else if (stopped && z.avail_in == 0) {
    why = "its zlib stream is truncated";
  } else if (stopped) {
    why = "it inflates to more than its recorded " + recorded + " bytes";
  } else if (!ended) {
    why = std::string("its zlib stream does not inflate (") + (z.msg ? z.msg : zError(rc)) + ")";
  }
  inflateEnd(&z);
  if (why.empty()) return BlobImage::kOk;
  *detail = why;
  return rc == Z_MEM_ERROR ? BlobImage::kOutOfMemory : BlobImage::kCorrupt;
}
#endif

}  // namespace

void BlobImage::Free::operator()(unsigned char* p) const { ::operator delete(p, kAlign); }

BlobImage::Status BlobImage::open(const Blob& blob, std::string* detail) {
  const uint64_t inflated = blob.inflated_size != nullptr ? *blob.inflated_size : 0;
  if (inflated == 0) {  // stored as is
    data_ = blob.data;
    size_ = blob.size;
    return kOk;
  }
  if (inflated > kMaxInflatedSize || blob.size > kMaxInflatedSize) {
    *detail = "its recorded sizes (" + std::to_string(blob.size) + " bytes inflating to " +
              std::to_string(inflated) + ") are not plausible";
    return kCorrupt;
  }
#if TILEAOT_HAVE_ZLIB
  auto* buffer = ::operator new(static_cast<size_t>(inflated), kAlign, std::nothrow);
  buffer_.reset(static_cast<unsigned char*>(buffer));
  if (!buffer_) {
    *detail = "no memory to inflate it to " + std::to_string(inflated) + " bytes";
    return kOutOfMemory;
  }
  const Status status = inflate_exactly(blob, buffer_.get(), inflated, detail);
  if (status != kOk) {
    buffer_.reset();
    return status;
  }
  data_ = buffer_.get();
  size_ = static_cast<size_t>(inflated);
  return kOk;
#else
  *detail = "it is zlib-compressed, but this libtileaot was built without zlib";
  return kCorrupt;
#endif
}

}  // namespace tileaot::detail
