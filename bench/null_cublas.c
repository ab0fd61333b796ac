/* The null libcublas of the host-overhead bench (bench/host_overhead.py, `NullCublas`): the entry points
 * aclnn_gpu/kernels/gemm.py calls, with cuBLAS's C signatures (cublas_api.h), each returning
 * CUBLAS_STATUS_SUCCESS at once. The library's GEMM wrapper runs unchanged over it, its ctypes calls
 * included: only what cuBLAS itself does is left out. */
#ifdef __cplusplus
extern "C" {
#endif

typedef void *cublasHandle_t;
static char handles[64];   /* distinct non-null handles */
static int made;

int cublasCreate_v2(cublasHandle_t *handle) { *handle = &handles[made++ % 64]; return 0; }
int cublasDestroy_v2(cublasHandle_t handle) { (void)handle; return 0; }
int cublasSetStream_v2(cublasHandle_t handle, void *stream) { (void)handle; (void)stream; return 0; }
int cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, unsigned long size)
{ (void)handle; (void)workspace; (void)size; return 0; }
int cublasSetMathMode(cublasHandle_t handle, int mode) { (void)handle; (void)mode; return 0; }
int cublasSetPointerMode_v2(cublasHandle_t handle, int mode) { (void)handle; (void)mode; return 0; }

int cublasGemmStridedBatchedEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                               const void *alpha, const void *a, int a_type, int lda, long long stride_a,
                               const void *b, int b_type, int ldb, long long stride_b, const void *beta,
                               void *c, int c_type, int ldc, long long stride_c, int batch, int compute,
                               int algo)
{
    (void)handle; (void)transa; (void)transb; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)a_type;
    (void)lda; (void)stride_a; (void)b; (void)b_type; (void)ldb; (void)stride_b; (void)beta; (void)c;
    (void)c_type; (void)ldc; (void)stride_c; (void)batch; (void)compute; (void)algo;
    return 0;
}

int cublasGemmBatchedEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k, const void *alpha,
                        const void *const *a, int a_type, int lda, const void *const *b, int b_type, int ldb,
                        const void *beta, void *const *c, int c_type, int ldc, int batch, int compute, int algo)
{
    (void)handle; (void)transa; (void)transb; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)a_type;
    (void)lda; (void)b; (void)b_type; (void)ldb; (void)beta; (void)c; (void)c_type; (void)ldc; (void)batch;
    (void)compute; (void)algo;
    return 0;
}

#ifdef __cplusplus
}
#endif
