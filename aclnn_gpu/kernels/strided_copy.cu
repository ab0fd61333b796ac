// strided_copy.cu -- gather a strided view into a contiguous buffer, and scatter one back.
//
// Operators whose kernels are written for contiguous tensors stage strided views through these
// (like CANN's Contiguous / ViewCopy). Elements are moved as opaque words of their byte size, so one
// instantiation per element size serves every dtype. The view is described by a tiling block
// (common.cuh layout, one operand: the view's strides in elements).
#include "common.cuh"

template <int BYTES> struct Word;
template <> struct Word<1> { typedef unsigned char type; };
template <> struct Word<2> { typedef unsigned short type; };
template <> struct Word<4> { typedef unsigned int type; };
template <> struct Word<8> { typedef unsigned long long type; };

template <int BYTES>
__global__ void __launch_bounds__(256) strided_gather(const void* __restrict__ view, void* __restrict__ packed,
                                                      const long long* __restrict__ tiling, long long n) {
  typedef typename Word<BYTES>::type W;
  const aclg::Shape shape = aclg::load_shape(tiling);
  const long long* stride = aclg::operand_strides(tiling, 0);
  for (long long i = aclg::global_thread(); i < n; i += aclg::grid_threads())
    static_cast<W*>(packed)[i] = static_cast<const W*>(view)[aclg::strided_offset(shape, stride, i)];
}

template <int BYTES>
__global__ void __launch_bounds__(256) strided_scatter(void* __restrict__ view, const void* __restrict__ packed,
                                                       const long long* __restrict__ tiling, long long n) {
  typedef typename Word<BYTES>::type W;
  const aclg::Shape shape = aclg::load_shape(tiling);
  const long long* stride = aclg::operand_strides(tiling, 0);
  for (long long i = aclg::global_thread(); i < n; i += aclg::grid_threads())
    static_cast<W*>(view)[aclg::strided_offset(shape, stride, i)] = static_cast<const W*>(packed)[i];
}
