/* Call overhead through the C ABI (bench/capi.py compiles and runs it): microseconds per call of a few
 * calls, the best of 5 batches of argv[1] calls each, printed as "<what> <us>". The same calls from
 * Python are timed by bench/capi.py in the same run. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_kl_div_backward.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#define TIME(what, body)                                          \
    do {                                                          \
        double best = 1e30;                                       \
        for (int batch = 0; batch < 5; batch++) {                 \
            double t0 = now_us();                                 \
            for (long i = 0; i < calls; i++) { body; }            \
            double t = (now_us() - t0) / calls;                   \
            if (t < best) best = t;                               \
        }                                                         \
        printf("%s %.3f\n", what, best);                          \
    } while (0)

/* Threads: each runs GetWorkspaceSize + execute on its own empty tensors and stream (nothing queued)
 * until told to stop; "threads <n> <pairs per second>" */
struct worker {
    aclTensor *t[4];
    aclrtStream stream;
    long pairs;
};
static volatile int stop_workers;

static void *work(void *arg)
{
    struct worker *w = arg;
    uint64_t ws;
    aclOpExecutor *ex;
    aclrtSetDevice(0);
    while (!stop_workers) {
        aclnnKlDivBackwardGetWorkspaceSize(w->t[0], w->t[1], w->t[2], 1, false, w->t[3], &ws, &ex);
        aclnnKlDivBackward(NULL, ws, ex, w->stream);
        w->pairs++;
    }
    return NULL;
}

static void threads(int n, void **d)
{
    int64_t empty[2] = {0, 8}, scalar[1] = {1};
    struct worker w[4];
    pthread_t id[4];
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 4; i++)
            w[k].t[i] = aclCreateTensor(i ? empty : scalar, i ? 2 : 0, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND,
                                        i ? empty : scalar, i ? 2 : 0, d[i]);
        aclrtCreateStream(&w[k].stream);
        w[k].pairs = 0;
    }
    stop_workers = 0;
    double t0 = now_us();
    for (int k = 0; k < n; k++)
        pthread_create(&id[k], NULL, work, &w[k]);
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
    stop_workers = 1;
    long pairs = 0;
    for (int k = 0; k < n; k++) {
        pthread_join(id[k], NULL);
        pairs += w[k].pairs;
    }
    printf("threads %d %.0f\n", n, pairs / ((now_us() - t0) / 1e6));
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 4; i++)
            aclDestroyTensor(w[k].t[i]);
        aclrtDestroyStream(w[k].stream);
    }
}

/* "capi_bench <calls> callgrind": the two loops bench/capi.py counts under callgrind
 * (--toggle-collect=measure_trivial or measure_pair): a call that does nothing, and KlDivBackward
 * GetWorkspaceSize + execute on empty tensors (an executor-cache hit, nothing queued), each after a
 * warm-up run of the same loop outside the measured function. */
__attribute__((noinline)) static void trivial_loop(long calls)
{
    uint32_t count;
    for (long i = 0; i < calls; i++)
        aclrtGetDeviceCount(&count);
}

__attribute__((noinline)) static void pair_loop(long calls, aclTensor **e, aclrtStream stream)
{
    uint64_t ws;
    aclOpExecutor *ex;
    for (long i = 0; i < calls; i++) {
        aclnnKlDivBackwardGetWorkspaceSize(e[0], e[1], e[2], 1, false, e[3], &ws, &ex);
        aclnnKlDivBackward(NULL, ws, ex, stream);
    }
}

/* (the empty asm keeps the compiler from turning the call into a jump: callgrind must see the
 * measured function return after the loop) */
__attribute__((noinline)) void measure_trivial(long calls)
{
    trivial_loop(calls);
    __asm__ __volatile__("" ::: "memory");
}

__attribute__((noinline)) void measure_pair(long calls, aclTensor **e, aclrtStream stream)
{
    pair_loop(calls, e, stream);
    __asm__ __volatile__("" ::: "memory");
}

static int counted(long calls)
{
    int64_t empty[2] = {0, 8}, scalar[1] = {1};
    void *d[4];
    aclTensor *e[4];
    aclrtStream stream;
    aclInit(NULL);
    aclrtSetDevice(0);
    aclrtCreateStream(&stream);
    for (int i = 0; i < 4; i++) {
        aclrtMalloc(&d[i], 128, ACL_MEM_MALLOC_HUGE_FIRST);
        e[i] = aclCreateTensor(i ? empty : scalar, i ? 2 : 0, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, i ? empty : scalar,
                               i ? 2 : 0, d[i]);
    }
    trivial_loop(calls);
    pair_loop(calls, e, stream);
    measure_trivial(calls);
    measure_pair(calls, e, stream);
    aclFinalize();
    return 0;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 200;
    if (argc > 2 && argv[2][0] == 'c')
        return counted(calls);
    int64_t dims[2] = {4, 8}, scalar[1] = {1};
    void *d[4];
    aclTensor *t[4];
    aclrtStream stream;
    uint32_t count;
    float ones[32];
    uint64_t ws;
    aclOpExecutor *ex;
    for (int i = 0; i < 32; i++) ones[i] = 0.5f;
    aclInit(NULL);
    aclrtSetDevice(0);
    aclrtCreateStream(&stream);
    for (int i = 0; i < 4; i++) {
        aclrtMalloc(&d[i], 128, ACL_MEM_MALLOC_HUGE_FIRST);
        aclrtMemcpy(d[i], 128, ones, 128, ACL_MEMCPY_HOST_TO_DEVICE);
        t[i] = aclCreateTensor(i ? dims : scalar, i ? 2 : 0, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, i ? dims : scalar,
                               i ? 2 : 0, d[i]);
    }
    TIME("aclrtGetDeviceCount", aclrtGetDeviceCount(&count));
    TIME("aclCreateTensor+aclDestroyTensor",
         aclDestroyTensor(aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, d[1])));
    TIME("aclrtMemcpy H2D 128 B", aclrtMemcpy(d[1], 128, ones, 128, ACL_MEMCPY_HOST_TO_DEVICE));
    TIME("KlDivBackward GetWorkspaceSize+execute+sync",
         aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], &ws, &ex);
         aclnnKlDivBackward(NULL, ws, ex, stream); aclrtSynchronizeStream(stream));
    /* empty tensors: GetWorkspaceSize (an executor-cache hit) and execute queue nothing, so the pair
     * is the library's and the C ABI's own cost, with no device work and no synchronize */
    int64_t empty[2] = {0, 8};
    aclTensor *e[4];
    for (int i = 0; i < 4; i++)
        e[i] = aclCreateTensor(i ? empty : scalar, i ? 2 : 0, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, i ? empty : scalar,
                               i ? 2 : 0, d[i]);
    TIME("KlDivBackward GetWorkspaceSize+execute, empty (nothing queued)",
         aclnnKlDivBackwardGetWorkspaceSize(e[0], e[1], e[2], 1, false, e[3], &ws, &ex);
         aclnnKlDivBackward(NULL, ws, ex, stream));
    for (int i = 0; i < 4; i++)
        aclDestroyTensor(e[i]);
    aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], &ws, &ex);
    aclSetAclOpExecutorRepeatable(ex);
    TIME("KlDivBackward reused executor: execute+sync",
         aclnnKlDivBackward(NULL, ws, ex, stream); aclrtSynchronizeStream(stream));
    aclDestroyAclOpExecutor(ex);
    for (int n = 1; n <= 4; n *= 2)
        threads(n, d);
    for (int i = 0; i < 4; i++) {
        aclDestroyTensor(t[i]);
        aclrtFree(d[i]);
    }
    aclrtDestroyStream(stream);
    aclFinalize();
    return 0;
}
