// Per-node gradient/Hessian histograms of binned features, as an XLA FFI custom call.
//
//   hist[node[i], f, bins[i, f], :] += gh[i, :]   for every sample i and feature f
//
// The scatter-add a histogram tree spends its time in. XLA's CPU scatter handles each
// update through generic index arithmetic; here the update is two adds into a table that
// fits in cache (nodes x features x bins x 2), over two threads when the data is large.
// JaxoptSuiteHistogramLeft skips the rows of odd (right-child) nodes, whose histograms the
// caller takes as parent minus sibling.
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Rows [begin, end) into out (zeroed by the caller); with left_only, rows of odd
// (right-child) nodes are skipped: their histograms follow from the parent's.
template <typename T, typename B>
bool HistogramRows(const B* bins, const T* gh, const int32_t* node, T* out,
                   int64_t begin, int64_t end, int64_t d, int64_t nodes, int64_t nb,
                   bool left_only) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t k = node[i];
    if (k < 0 || k >= nodes) return false;
    if (left_only && (k & 1)) continue;
    const T g = gh[2 * i];
    const T h = gh[2 * i + 1];
    T* table = out + k * d * nb * 2;
    const B* row = bins + i * d;
    for (int64_t f = 0; f < d; ++f) {
      const int64_t b = row[f];
      if (b < 0 || b >= nb) return false;
      T* cell = table + (f * nb + b) * 2;
      cell[0] += g;
      cell[1] += h;
    }
  }
  return true;
}

// Two threads over halves of the rows when there is enough work, each into its own table.
template <typename T, typename B>
bool Histogram(const B* bins, const T* gh, const int32_t* node, T* out, int64_t n,
               int64_t d, int64_t nodes, int64_t nb, bool left_only) {
  const int64_t size = nodes * d * nb * 2;
  std::memset(out, 0, sizeof(T) * size);
  if (n * d < (int64_t{1} << 18)) {
    return HistogramRows(bins, gh, node, out, 0, n, d, nodes, nb, left_only);
  }
  std::vector<T> other(size, T(0));
  const int64_t half = n / 2;
  bool ok_other = true;
  std::thread worker([&] {
    ok_other = HistogramRows(bins, gh, node, other.data(), half, n, d, nodes, nb, left_only);
  });
  const bool ok = HistogramRows(bins, gh, node, out, 0, half, d, nodes, nb, left_only);
  worker.join();
  for (int64_t j = 0; j < size; ++j) out[j] += other[j];
  return ok && ok_other;
}

template <bool kLeftOnly>
ffi::Error HistogramImpl(ffi::AnyBuffer bins, ffi::AnyBuffer gh,
                         ffi::Buffer<ffi::S32> node, ffi::Result<ffi::AnyBuffer> out) {
  const auto b_dims = bins.dimensions();
  const auto o_dims = out->dimensions();
  if (b_dims.size() != 2 || o_dims.size() != 4 || o_dims[3] != 2) {
    return ffi::Error::InvalidArgument("histogram: bins (n, d), out (nodes, d, bins, 2)");
  }
  const int64_t n = b_dims[0], d = b_dims[1];
  const int64_t nodes = o_dims[0], nb = o_dims[2];
  if (o_dims[1] != d || static_cast<int64_t>(gh.element_count()) != 2 * n ||
      static_cast<int64_t>(node.element_count()) != n) {
    return ffi::Error::InvalidArgument("histogram: gh must be (n, 2) and node (n,)");
  }
  const auto type = gh.element_type();
  if (out->element_type() != type) {
    return ffi::Error::InvalidArgument("histogram: gh and out must share a dtype");
  }
  const auto bin_type = bins.element_type();
  if (bin_type != ffi::DataType::S32 && bin_type != ffi::DataType::U8) {
    return ffi::Error::InvalidArgument("histogram: bins must be int32 or uint8");
  }
  const bool small = bin_type == ffi::DataType::U8;
  const int32_t* node_data = node.typed_data();
  bool ok;
  if (type == ffi::DataType::F32) {
    float* o = out->typed_data<float>();
    const float* g = gh.typed_data<float>();
    ok = small ? Histogram(bins.typed_data<uint8_t>(), g, node_data, o, n, d, nodes, nb, kLeftOnly)
               : Histogram(bins.typed_data<int32_t>(), g, node_data, o, n, d, nodes, nb, kLeftOnly);
  } else if (type == ffi::DataType::F64) {
    double* o = out->typed_data<double>();
    const double* g = gh.typed_data<double>();
    ok = small ? Histogram(bins.typed_data<uint8_t>(), g, node_data, o, n, d, nodes, nb, kLeftOnly)
               : Histogram(bins.typed_data<int32_t>(), g, node_data, o, n, d, nodes, nb, kLeftOnly);
  } else {
    return ffi::Error::InvalidArgument("histogram: dtype must be float32 or float64");
  }
  if (!ok) return ffi::Error::InvalidArgument("histogram: a bin or node index is out of range");
  return ffi::Error::Success();
}

}  // namespace

#define JAXOPT_SUITE_BIND                 \
  ffi::Ffi::Bind()                        \
      .Arg<ffi::AnyBuffer>()              \
      .Arg<ffi::AnyBuffer>()              \
      .Arg<ffi::Buffer<ffi::S32>>()       \
      .Ret<ffi::AnyBuffer>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxoptSuiteHistogram, HistogramImpl<false>, JAXOPT_SUITE_BIND);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxoptSuiteHistogramLeft, HistogramImpl<true>, JAXOPT_SUITE_BIND);
