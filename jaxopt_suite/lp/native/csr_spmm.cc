// CSR matrix times a dense panel on the CPU, as an XLA FFI custom call.
//
//   Y[m, B] = A[m, n] X[n, B]   (row-major, batch in the trailing axis)
//
// A is given by its CSR arrays (indptr, indices, data). Every stored entry adds one
// scaled row of X to one row of Y, so the inner loop runs over B contiguous values and
// vectorises. XLA's own CPU gather handles one element at a time, which is what makes
// a batched sparse product through jnp slower than a dense one at a few percent density.
#include <cstdint>

#include "xla/ffi/api/ffi.h"

#include "vector_width.h"  // kVectorBytes

namespace ffi = xla::ffi;

namespace {

// Columns [b0, b0 + N * L) of Y for every row, where L values of T fill one vector register
// (a "line" of kVectorBytes): the N running sums of a row stay in vector registers across
// the row's entries, and each entry adds value * (N lines of X's row).
template <typename T, int N>
void CsrLines(const int32_t* indptr, const int32_t* indices, const T* data, const T* x, T* y,
              int64_t rows, int64_t batch, int64_t b0) {
  constexpr int L = kVectorBytes / sizeof(T);
  typedef T Line __attribute__((vector_size(kVectorBytes)));
  for (int64_t i = 0; i < rows; ++i) {
    Line acc[N];
    for (int v = 0; v < N; ++v) acc[v] = Line{};
    for (int32_t k = indptr[i]; k < indptr[i + 1]; ++k) {
      const T value = data[k];
      const T* in = x + static_cast<int64_t>(indices[k]) * batch + b0;
      for (int v = 0; v < N; ++v) {
        Line line;
        __builtin_memcpy(&line, in + v * L, sizeof(Line));
        acc[v] += value * line;
      }
    }
    T* out = y + i * batch + b0;
    for (int v = 0; v < N; ++v) __builtin_memcpy(out + v * L, &acc[v], sizeof(Line));
  }
}

// Columns [b0, b0 + W) for a compile-time W below one line: the W running sums stay in
// registers, one pass over the matrix for all of them.
template <typename T, int W>
void CsrNarrow(const int32_t* indptr, const int32_t* indices, const T* data, const T* x, T* y,
               int64_t rows, int64_t batch, int64_t b0) {
  for (int64_t i = 0; i < rows; ++i) {
    T acc[W] = {};
    for (int32_t k = indptr[i]; k < indptr[i + 1]; ++k) {
      const T value = data[k];
      const T* in = x + static_cast<int64_t>(indices[k]) * batch + b0;
      for (int w = 0; w < W; ++w) acc[w] += value * in[w];
    }
    T* out = y + i * batch + b0;
    for (int w = 0; w < W; ++w) out[w] = acc[w];
  }
}

// The columns left after whole lines (width < W + 1): CsrNarrow of exactly that width.
template <typename T, int W>
void CsrTail(int width, const int32_t* indptr, const int32_t* indices, const T* data,
             const T* x, T* y, int64_t rows, int64_t batch, int64_t b0) {
  if (width == W) {
    CsrNarrow<T, W>(indptr, indices, data, x, y, rows, batch, b0);
  } else if constexpr (W > 1) {
    CsrTail<T, W - 1>(width, indptr, indices, data, x, y, rows, batch, b0);
  }
}

template <typename T>
void CsrPanel(const int32_t* indptr, const int32_t* indices, const T* data, const T* x,
              T* y, int64_t rows, int64_t batch) {
  constexpr int64_t L = kVectorBytes / sizeof(T);
  int64_t b0 = 0;
  for (; b0 + 8 * L <= batch; b0 += 8 * L) {
    CsrLines<T, 8>(indptr, indices, data, x, y, rows, batch, b0);
  }
  if (b0 + 4 * L <= batch) {
    CsrLines<T, 4>(indptr, indices, data, x, y, rows, batch, b0);
    b0 += 4 * L;
  }
  if (b0 + 2 * L <= batch) {
    CsrLines<T, 2>(indptr, indices, data, x, y, rows, batch, b0);
    b0 += 2 * L;
  }
  if (b0 + L <= batch) {
    CsrLines<T, 1>(indptr, indices, data, x, y, rows, batch, b0);
    b0 += L;
  }
  if (b0 < batch) {
    CsrTail<T, L - 1>(static_cast<int>(batch - b0), indptr, indices, data, x, y, rows, batch,
                      b0);
  }
}

ffi::Error CsrPanelImpl(ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> indices,
                        ffi::AnyBuffer data, ffi::AnyBuffer x,
                        ffi::Result<ffi::AnyBuffer> y) {
  const auto x_dims = x.dimensions();
  const auto y_dims = y->dimensions();
  if (x_dims.size() < 1 || x_dims.size() > 2 || y_dims.size() != x_dims.size()) {
    return ffi::Error::InvalidArgument("csr_panel: x and y must be (n,) or (n, B)");
  }
  const int64_t rows = static_cast<int64_t>(indptr.element_count()) - 1;
  const int64_t batch = x_dims.size() == 2 ? x_dims[1] : 1;
  if (y_dims[0] != rows || (x_dims.size() == 2 && y_dims[1] != batch)) {
    return ffi::Error::InvalidArgument("csr_panel: y must be (m, B)");
  }
  if (data.element_count() != indices.element_count()) {
    return ffi::Error::InvalidArgument("csr_panel: data and indices differ in length");
  }
  const auto type = data.element_type();
  if (x.element_type() != type || y->element_type() != type) {
    return ffi::Error::InvalidArgument("csr_panel: data, x and y must share a dtype");
  }
  if (type == ffi::DataType::F64) {
    CsrPanel<double>(indptr.typed_data(), indices.typed_data(), data.typed_data<double>(),
                     x.typed_data<double>(), y->typed_data<double>(), rows, batch);
  } else if (type == ffi::DataType::F32) {
    CsrPanel<float>(indptr.typed_data(), indices.typed_data(), data.typed_data<float>(),
                    x.typed_data<float>(), y->typed_data<float>(), rows, batch);
  } else {
    return ffi::Error::InvalidArgument("csr_panel: dtype must be float32 or float64");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxoptSuiteCsrPanel, CsrPanelImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
