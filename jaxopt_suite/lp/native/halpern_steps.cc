// Restarted-Halpern PDHG iterations of PDLP, fused, on the CPU, as an XLA FFI custom call.
//
// One call runs `steps` iterations of the loop in jaxopt_suite/lp/pdlp.py (_halpern_steps:
// the PDHG step _pdhg and the Halpern average) on a batch held in columns (row-major
// (n, B) and (m, B) panels, one LP per column; y / sigma as y * (1 / sigma), as XLA
// computes it there):
//
//   x^ = clip(x - tau (c - A^T y), lv, uv)        x_bar = 2 x^ - x
//   t  = y / sigma - A x_bar                      y^ = sigma (t - clip(t, -ur, -lr))
//   w  = (inner + k + 1) / (inner + k + 2)
//   x <- w x_bar + (1 - w) x0                     y <- w (2 y^ - y) + (1 - w) y0
//
// XLA runs that loop as two sparse products and several elementwise passes per iteration,
// each a separate step with its own dispatch cost (about a microsecond on CPU), which is
// most of an iteration's time for a few LPs of a few hundred rows. Here the columns are
// independent, so each group of columns (up to 8 vector registers wide) runs all `steps`
// iterations while its rows stay in cache: per matrix row, the running sums of the group
// sit in registers and the elementwise update follows at once. A single LP (B = 1) takes
// each sparse product into a scratch vector and then updates all rows in a loop the
// compiler vectorises (row by row it was scalar, slower than XLA's passes for n of 10^4).
//
// Vectors shared by the batch (the row bounds, and in some uses the costs and variable
// bounds) may be given as (k, 1); the per-column scalars tau, sigma and inner as (B,).
// Comparisons replace a value only when it lies strictly beyond a bound, so a NaN
// iterate stays NaN (the solver reports NUMERICAL_ERROR from it).
#include <cstdint>
#include <cstring>

#include "xla/ffi/api/ffi.h"

#include "vector_width.h"  // kVectorBytes

namespace ffi = xla::ffi;

namespace {

// W columns of T at once: a GCC vector of W lanes (W a power of two; W = 1 is a scalar).
template <typename T, int W>
struct Lanes {
  typedef T V __attribute__((vector_size(W * sizeof(T))));
  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static V splat(T s) { return V{} + s; }
  static V low(V v, V lo) { return v < lo ? lo : v; }   // max(lo, v), NaN kept
  static V high(V v, V hi) { return v > hi ? hi : v; }  // min(hi, v), NaN kept
};

template <typename T>
struct Lanes<T, 1> {
  typedef T V;
  static V load(const T* p) { return *p; }
  static void store(T* p, V v) { *p = v; }
  static V splat(T s) { return s; }
  static V low(V v, V lo) { return v < lo ? lo : v; }
  static V high(V v, V hi) { return v > hi ? hi : v; }
};

// A panel operand: (k, B), or (k, 1) shared by every column.
template <typename T>
struct Panel {
  const T* data;
  int64_t stride;  // B, or 0 when shared
  int64_t shared;  // 1 when shared
};

template <typename T, int W>
typename Lanes<T, W>::V Get(const Panel<T>& p, int64_t row, int64_t b0) {
  if (p.shared) return Lanes<T, W>::splat(p.data[row]);
  return Lanes<T, W>::load(p.data + row * p.stride + b0);
}

struct Csr {
  const int32_t* indptr;
  const int32_t* indices;
};

// acc[v] = row `row` of the CSR matrix times columns [b0 + v W, b0 + (v + 1) W) of the
// row-major panel (`batch` columns), for v < N.
// (always inlined, as Primal and Dual: called, they passed registers through memory)
#define JAXOPT_INLINE inline __attribute__((always_inline))

template <typename T, int W, int N>
JAXOPT_INLINE void RowProduct(Csr csr, const T* data, int64_t row, const T* panel, int64_t batch,
                int64_t b0, typename Lanes<T, W>::V* acc) {
  for (int v = 0; v < N; ++v) acc[v] = Lanes<T, W>::splat(T(0));
  for (int32_t e = csr.indptr[row]; e < csr.indptr[row + 1]; ++e) {
    const T value = data[e];
    const T* in = panel + static_cast<int64_t>(csr.indices[e]) * batch + b0;
    for (int v = 0; v < N; ++v) acc[v] += value * Lanes<T, W>::load(in + v * W);
  }
}

// The primal update of one row (W lanes): returns x_bar = 2 x^ - x, sets *x_new.
template <typename T, int W, typename V = typename Lanes<T, W>::V>
JAXOPT_INLINE V Primal(V xi, V tau, V c, V aty, V lv, V uv, V w, V rest, V x0, V* x_new) {
  using L = Lanes<T, W>;
  V step = xi - tau * (c - aty);
  step = L::high(L::low(step, lv), uv);
  const V bar = L::splat(T(2)) * step - xi;
  *x_new = w * bar + rest * x0;
  return bar;
}

// The dual update of one row (W lanes): the new y.
template <typename T, int W, typename V = typename Lanes<T, W>::V>
JAXOPT_INLINE V Dual(V yj, V sigma, V sigma_inv, V ax, V lr, V ur, V w, V rest, V y0) {
  using L = Lanes<T, W>;
  const V t = yj * sigma_inv - ax;  // y / sigma as y * (1 / sigma), as XLA computes it
  const V clipped = L::high(L::low(t, -ur), -lr);
  const V y_hat = sigma * (t - clipped);
  return w * (L::splat(T(2)) * y_hat - yj) + rest * y0;
}

// All `steps` iterations for columns [b0, b0 + N W): N registers of W lanes each.
template <typename T, int W, int N>
void Columns(Csr at, const T* at_data, Csr a, const T* a_data, int64_t n, int64_t m,
             int64_t batch, Panel<T> c, Panel<T> lv, Panel<T> uv, Panel<T> lr, Panel<T> ur,
             const T* x0, const T* y0, const T* tau, const T* sigma, const T* inner, T* x,
             T* y, T* x_bar, int64_t steps, int64_t b0) {
  using L = Lanes<T, W>;
  using V = typename L::V;
  const V one = L::splat(T(1)), two = L::splat(T(2));
  V tau_v[N], sigma_v[N], sigma_inv[N], inner_v[N], w[N], rest[N];
  for (int v = 0; v < N; ++v) {
    tau_v[v] = L::load(tau + b0 + v * W);
    sigma_v[v] = L::load(sigma + b0 + v * W);
    sigma_inv[v] = one / sigma_v[v];
    inner_v[v] = L::load(inner + b0 + v * W);
  }
  for (int64_t k = 0; k < steps; ++k) {
    for (int v = 0; v < N; ++v) {
      const V base = inner_v[v] + L::splat(static_cast<T>(k));
      w[v] = (base + one) / (base + two);
      rest[v] = one - w[v];
    }
    for (int64_t i = 0; i < n; ++i) {  // primal: row i of A^T
      V aty[N];
      RowProduct<T, W, N>(at, at_data, i, y, batch, b0, aty);
      for (int v = 0; v < N; ++v) {
        const int64_t col = b0 + v * W, at_row = i * batch + col;
        V x_new;
        const V bar = Primal<T, W>(L::load(x + at_row), tau_v[v], Get<T, W>(c, i, col), aty[v],
                                   Get<T, W>(lv, i, col), Get<T, W>(uv, i, col), w[v], rest[v],
                                   L::load(x0 + at_row), &x_new);
        L::store(x_bar + at_row, bar);
        L::store(x + at_row, x_new);
      }
    }
    for (int64_t j = 0; j < m; ++j) {  // dual: row j of A
      V ax[N];
      RowProduct<T, W, N>(a, a_data, j, x_bar, batch, b0, ax);
      for (int v = 0; v < N; ++v) {
        const int64_t col = b0 + v * W, a_row = j * batch + col;
        L::store(y + a_row, Dual<T, W>(L::load(y + a_row), sigma_v[v], sigma_inv[v], ax[v],
                                       Get<T, W>(lr, j, col), Get<T, W>(ur, j, col), w[v],
                                       rest[v], L::load(y0 + a_row)));
      }
    }
  }
}

// One LP (B = 1): each pass's sparse product first, into `scratch` (n + m values), then its
// elementwise update in a plain loop over the rows, which the compiler vectorises. Per
// row, the arithmetic is that of Columns<T, 1, 1> in the same order, so the results are
// bit-equal to a column's in a batch. Kept out of line: inlined into Run, beside the
// batched path, its iterations took 2.1 to 2.2 us instead of 1.96 (float64, 600 x 220 with
// 1200 nonzeros, 256 steps, a 2-core Intel Xeon with AVX-512), and 3.6 us once the batched
// path grew: the compiler's choices for its loops changed with what surrounds them.
template <typename T>
__attribute__((noinline)) void Single(Csr at, const T* at_data, Csr a, const T* a_data,
                                      int64_t n, int64_t m, const T* c, const T* lv,
                                      const T* uv, const T* lr, const T* ur, const T* x0,
                                      const T* y0, T tau, T sigma, T inner, T* x, T* y,
                                      T* scratch, int64_t steps) {
  T* x_bar = scratch;  // holds A^T y, then x_bar, row by row
  T* ax = scratch + n;
  const T sigma_inv = T(1) / sigma;
  for (int64_t k = 0; k < steps; ++k) {
    const T base = inner + static_cast<T>(k);
    const T w = (base + T(1)) / (base + T(2));
    const T rest = T(1) - w;
    for (int64_t i = 0; i < n; ++i) RowProduct<T, 1, 1>(at, at_data, i, y, 1, 0, x_bar + i);
    for (int64_t i = 0; i < n; ++i) {
      x_bar[i] = Primal<T, 1>(x[i], tau, c[i], x_bar[i], lv[i], uv[i], w, rest, x0[i], x + i);
    }
    for (int64_t j = 0; j < m; ++j) RowProduct<T, 1, 1>(a, a_data, j, x_bar, 1, 0, ax + j);
    for (int64_t j = 0; j < m; ++j) {
      y[j] = Dual<T, 1>(y[j], sigma, sigma_inv, ax[j], lr[j], ur[j], w, rest, y0[j]);
    }
  }
}

// Cuts the columns into groups of 8, 4, 2 and 1 vector registers (kVectorBytes), then
// powers of two below one register (each group streams the matrix once per pass: wide
// groups for large matrices).
template <typename T, typename... Args>
void AllColumns(int64_t batch, Args... args) {
  constexpr int L = kVectorBytes / sizeof(T);
  int64_t b0 = 0;
  for (; b0 + 8 * L <= batch; b0 += 8 * L) Columns<T, L, 8>(args..., b0);
  if (b0 + 4 * L <= batch) Columns<T, L, 4>(args..., b0), b0 += 4 * L;
  if (b0 + 2 * L <= batch) Columns<T, L, 2>(args..., b0), b0 += 2 * L;
  if (b0 + L <= batch) Columns<T, L, 1>(args..., b0), b0 += L;
  if constexpr (L >= 2) {
    if (b0 + L / 2 <= batch) Columns<T, L / 2, 1>(args..., b0), b0 += L / 2;
  }
  if constexpr (L >= 4) {
    if (b0 + L / 4 <= batch) Columns<T, L / 4, 1>(args..., b0), b0 += L / 4;
  }
  if constexpr (L >= 8) {
    if (b0 + L / 8 <= batch) Columns<T, L / 8, 1>(args..., b0), b0 += L / 8;
  }
  if constexpr (L >= 16) {
    if (b0 + L / 16 <= batch) Columns<T, L / 16, 1>(args..., b0), b0 += L / 16;
  }
}

template <typename T>
Panel<T> AsPanel(const ffi::AnyBuffer& buffer, int64_t batch) {
  const auto dims = buffer.dimensions();
  const bool shared = dims.size() < 2 || dims[1] == 1;
  return Panel<T>{buffer.typed_data<T>(), shared ? 0 : batch, shared ? 1 : 0};
}

// rows x (batch or 1), the shape a panel operand must have
bool PanelShape(const ffi::AnyBuffer& buffer, int64_t rows, int64_t batch) {
  const auto dims = buffer.dimensions();
  if (dims.size() == 1) return dims[0] == rows && batch == 1;
  return dims.size() == 2 && dims[0] == rows && (dims[1] == batch || dims[1] == 1);
}

template <typename T>
void Run(ffi::Buffer<ffi::S32> at_indptr, ffi::Buffer<ffi::S32> at_indices,
         ffi::AnyBuffer at_data, ffi::Buffer<ffi::S32> a_indptr,
         ffi::Buffer<ffi::S32> a_indices, ffi::AnyBuffer a_data, ffi::AnyBuffer c,
         ffi::AnyBuffer lv, ffi::AnyBuffer uv, ffi::AnyBuffer lr, ffi::AnyBuffer ur,
         ffi::AnyBuffer x_in, ffi::AnyBuffer y_in, ffi::AnyBuffer x0, ffi::AnyBuffer y0,
         ffi::AnyBuffer tau, ffi::AnyBuffer sigma, ffi::AnyBuffer inner, int64_t steps,
         T* x, T* y, T* scratch, int64_t n, int64_t m, int64_t batch) {
  std::memcpy(x, x_in.typed_data<T>(), sizeof(T) * n * batch);
  std::memcpy(y, y_in.typed_data<T>(), sizeof(T) * m * batch);
  if (batch == 1) {
    Single<T>(Csr{at_indptr.typed_data(), at_indices.typed_data()}, at_data.typed_data<T>(),
              Csr{a_indptr.typed_data(), a_indices.typed_data()}, a_data.typed_data<T>(), n, m,
              c.typed_data<T>(), lv.typed_data<T>(), uv.typed_data<T>(), lr.typed_data<T>(),
              ur.typed_data<T>(), x0.typed_data<T>(), y0.typed_data<T>(),
              tau.typed_data<T>()[0], sigma.typed_data<T>()[0], inner.typed_data<T>()[0], x, y,
              scratch, steps);
    return;
  }
  AllColumns<T>(batch, Csr{at_indptr.typed_data(), at_indices.typed_data()},
                at_data.typed_data<T>(), Csr{a_indptr.typed_data(), a_indices.typed_data()},
                a_data.typed_data<T>(), n, m, batch, AsPanel<T>(c, batch),
                AsPanel<T>(lv, batch), AsPanel<T>(uv, batch), AsPanel<T>(lr, batch),
                AsPanel<T>(ur, batch), x0.typed_data<T>(), y0.typed_data<T>(),
                tau.typed_data<T>(), sigma.typed_data<T>(), inner.typed_data<T>(), x, y,
                scratch, steps);  // (n, B): x_bar
}

ffi::Error HalpernStepsImpl(ffi::Buffer<ffi::S32> at_indptr, ffi::Buffer<ffi::S32> at_indices,
                            ffi::AnyBuffer at_data, ffi::Buffer<ffi::S32> a_indptr,
                            ffi::Buffer<ffi::S32> a_indices, ffi::AnyBuffer a_data,
                            ffi::AnyBuffer c, ffi::AnyBuffer lv, ffi::AnyBuffer uv,
                            ffi::AnyBuffer lr, ffi::AnyBuffer ur, ffi::AnyBuffer x_in,
                            ffi::AnyBuffer y_in, ffi::AnyBuffer x0, ffi::AnyBuffer y0,
                            ffi::AnyBuffer tau, ffi::AnyBuffer sigma, ffi::AnyBuffer inner,
                            int64_t steps, ffi::Result<ffi::AnyBuffer> x_out,
                            ffi::Result<ffi::AnyBuffer> y_out,
                            ffi::Result<ffi::AnyBuffer> scratch) {
  const auto x_dims = x_in.dimensions();
  const auto y_dims = y_in.dimensions();
  if (x_dims.size() != 2 || y_dims.size() != 2 || x_dims[1] != y_dims[1]) {
    return ffi::Error::InvalidArgument("halpern_steps: x and y must be (n, B) and (m, B)");
  }
  const int64_t n = x_dims[0], m = y_dims[0], batch = x_dims[1];
  if (at_indptr.element_count() != n + 1 || a_indptr.element_count() != m + 1) {
    return ffi::Error::InvalidArgument("halpern_steps: A is not (m, n) for x (n, B), y (m, B)");
  }
  if (at_data.element_count() != at_indices.element_count() ||
      a_data.element_count() != a_indices.element_count()) {
    return ffi::Error::InvalidArgument("halpern_steps: data and indices differ in length");
  }
  if (!PanelShape(c, n, batch) || !PanelShape(lv, n, batch) || !PanelShape(uv, n, batch) ||
      !PanelShape(lr, m, batch) || !PanelShape(ur, m, batch) ||
      x0.element_count() != n * batch || y0.element_count() != m * batch) {
    return ffi::Error::InvalidArgument("halpern_steps: an operand's shape does not fit");
  }
  if (tau.element_count() != batch || sigma.element_count() != batch ||
      inner.element_count() != batch) {
    return ffi::Error::InvalidArgument("halpern_steps: tau, sigma and inner must be (B,)");
  }
  if (steps < 0) return ffi::Error::InvalidArgument("halpern_steps: steps must be >= 0");
  // a batch keeps x_bar, (n, B); one LP also A^T y and A x_bar, n + m values
  if (scratch->element_count() != (batch == 1 ? n + m : n * batch)) {
    return ffi::Error::InvalidArgument(
        "halpern_steps: the scratch output must be (n + m, 1) for one LP, (n, B) for B > 1");
  }
  const auto type = x_in.element_type();
  for (const ffi::AnyBuffer* b : {&at_data, &a_data, &c, &lv, &uv, &lr, &ur, &y_in, &x0, &y0,
                                  &tau, &sigma, &inner}) {
    if (b->element_type() != type) {
      return ffi::Error::InvalidArgument("halpern_steps: every float operand must share a dtype");
    }
  }
  // the same call for either dtype, T taken from the argument's type
  const auto run = [&](auto zero) {
    using T = decltype(zero);
    Run<T>(at_indptr, at_indices, at_data, a_indptr, a_indices, a_data, c, lv, uv, lr, ur, x_in,
           y_in, x0, y0, tau, sigma, inner, steps, x_out->typed_data<T>(),
           y_out->typed_data<T>(), scratch->typed_data<T>(), n, m, batch);
  };
  if (type == ffi::DataType::F64) {
    run(0.0);
  } else if (type == ffi::DataType::F32) {
    run(0.0f);
  } else {
    return ffi::Error::InvalidArgument("halpern_steps: dtype must be float32 or float64");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxoptSuiteHalpernSteps, HalpernStepsImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Attr<int64_t>("steps")
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
