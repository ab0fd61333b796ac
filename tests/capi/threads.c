/* Threads of a C program calling the C ABI at once: each runs create / KL backward / destroy cycles
 * on its own stream and checks its result, and each reads back its own recent error message
 * (aclGetRecentErrMsg is per thread). Prints "threads ok" or the first failure. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_kl_div_backward.h"

#define THREADS 6
#define CYCLES 40

static int failures = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(int id, const char *what, int code)
{
    pthread_mutex_lock(&lock);
    failures++;
    printf("thread %d: %s: %d: %s\n", id, what, code, aclGetRecentErrMsg());
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg, c, i, ret;
    aclrtStream stream = NULL;
    char expected[64];
    if ((ret = aclrtCreateStream(&stream)) != 0) { fail(id, "aclrtCreateStream", ret); return NULL; }
    for (c = 0; c < CYCLES; c++) {
        float g = (float)(id + 1), self[4] = {-1, -2, -3, -4}, target[4] = {0.1f, 0.2f, 0.3f, 0.4f}, out[4];
        int64_t dims[1] = {4};
        void *d[4];
        aclTensor *t[4];
        uint64_t ws = 0;
        aclOpExecutor *ex = NULL;
        float *hosts[4] = {&g, self, target, out};
        for (i = 0; i < 4; i++) {
            aclrtMalloc(&d[i], 16, ACL_MEM_MALLOC_HUGE_FIRST);
            aclrtMemcpy(d[i], 16, hosts[i], i == 0 ? 4 : 16, ACL_MEMCPY_HOST_TO_DEVICE);
            t[i] = aclCreateTensor(dims, i == 0 ? 0 : 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, i == 0 ? 0 : 1, d[i]);
        }
        ret = aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 2, false, t[3], &ws, &ex);
        if (ret == 0) ret = aclnnKlDivBackward(NULL, 0, ex, stream);
        if (ret == 0) ret = aclrtSynchronizeStream(stream);
        if (ret == 0) ret = aclrtMemcpy(out, 16, d[3], 16, ACL_MEMCPY_DEVICE_TO_HOST);
        if (ret != 0) { fail(id, "cycle", ret); break; }
        for (i = 0; i < 4; i++) {
            if (out[i] != -target[i] * g) { fail(id, "wrong result", i); break; }
        }
        for (i = 0; i < 4; i++) { aclDestroyTensor(t[i]); aclrtFree(d[i]); }
        /* a per-thread error message: the deviceId in it is this thread's */
        ret = aclrtSetDevice(100 + id);
        snprintf(expected, sizeof(expected), "deviceId %d", 100 + id);
        if (ret == 0 || strstr(aclGetRecentErrMsg(), expected) == NULL) fail(id, "recent error of another thread", ret);
    }
    aclrtDestroyStream(stream);
    return NULL;
}

int main(void)
{
    pthread_t threads[THREADS];
    int i;
    aclInit(NULL);
    aclrtSetDevice(0);
    for (i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
    for (i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    aclrtResetDevice(0);
    aclFinalize();
    printf(failures ? "threads FAILED\n" : "threads ok\n");
    return failures != 0;
}
