// The widest vector register the build targets (-march=native), shared by the kernels in
// this folder. A GCC vector wider than the target's registers is split into several, and on
// an AVX2 host (32-byte registers) the kernels ran several times slower with 64-byte
// vectors than with 32-byte ones. _native.build keys its cache on this file too.
#ifndef JAXOPT_SUITE_LP_NATIVE_VECTOR_WIDTH_H_
#define JAXOPT_SUITE_LP_NATIVE_VECTOR_WIDTH_H_

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

#endif  // JAXOPT_SUITE_LP_NATIVE_VECTOR_WIDTH_H_
