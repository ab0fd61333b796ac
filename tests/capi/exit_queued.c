/* A C program that ends with work still queued on its stream (argv[1]): "return" (main returns),
 * "finalize" (aclFinalize without a synchronize, then main returns) or "exit" (exit(7) while two
 * threads keep calling the operator). Prints "queued" once its work is queued and writes "exiting"
 * to stderr just before it ends; anything else on stderr, a signal or another exit code is a failure
 * of the library (tests/capi/test_capi.py). The workspaces come from aclrtMallocAlign32. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ctc_loss.h"

#define T 400
#define N 64
#define C 50
#define L 40
#define LAUNCHES 40

typedef struct {
    aclrtStream stream;
    aclTensor *nll, *alpha;
} Work;

static aclTensor *log_probs, *targets;

static aclTensor *tensor(const int64_t *dims, int rank, aclDataType type, size_t element)
{
    size_t bytes = element;
    void *dev = NULL;
    int i;
    for (i = 0; i < rank; i++) bytes *= (size_t)dims[i];
    if (aclrtMalloc(&dev, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || aclrtMemset(dev, bytes, 0, bytes) != 0) return NULL;
    return aclCreateTensor(dims, (uint64_t)rank, type, NULL, 0, ACL_FORMAT_ND, dims, (uint64_t)rank, dev);
}

static int make_work(Work *w)
{
    int64_t nll_dims[1] = {N}, alpha_dims[3] = {N, T, 2 * L + 1};
    w->nll = tensor(nll_dims, 1, ACL_FLOAT, 4);
    w->alpha = tensor(alpha_dims, 3, ACL_FLOAT, 4);
    return aclrtCreateStream(&w->stream) == 0 && w->nll && w->alpha ? 0 : 1;
}

/* launches CTC forwards (forever when launches < 0, until a call is refused as the process ends) */
static int enqueue(Work *w, int launches)
{
    int64_t il[N], tl[N];
    int i, ret = 0;
    for (i = 0; i < N; i++) { il[i] = T; tl[i] = L; }
    for (i = 0; launches < 0 || i < launches; i++) {
        uint64_t size = 0;
        void *workspace = NULL;
        aclOpExecutor *executor = NULL;
        aclIntArray *ila = aclCreateIntArray(il, N), *tla = aclCreateIntArray(tl, N);
        ret = aclnnCtcLossGetWorkspaceSize(log_probs, targets, ila, tla, 0, false, w->nll, w->alpha, &size, &executor);
        if (ret == 0 && size > 0) ret = aclrtMallocAlign32(&workspace, size, ACL_MEM_MALLOC_HUGE_FIRST);
        if (ret == 0) ret = aclnnCtcLoss(workspace, size, executor, w->stream);
        if (ret != 0) return launches < 0 ? 0 : ret;
        if (launches < 0 && i % 4 == 3 && aclrtSynchronizeStream(w->stream) != 0) return 0;
    }
    return 0;
}

static void *caller(void *arg)
{
    aclrtSetDevice(0);
    enqueue((Work *)arg, -1);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "return";
    int64_t lp_dims[3] = {T, N, C}, tg_dims[2] = {N, L};
    Work mine, theirs[2];
    pthread_t threads[2];
    int i;
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 10;
    log_probs = tensor(lp_dims, 3, ACL_FLOAT, 4);
    targets = tensor(tg_dims, 2, ACL_INT64, 8);
    if (!log_probs || !targets || make_work(&mine) != 0) return 11;
    if (strcmp(mode, "exit") == 0) {
        /* everything made first: a synchronous call waits for every stream */
        for (i = 0; i < 2; i++) if (make_work(&theirs[i]) != 0) return 12;
        for (i = 0; i < 2; i++) pthread_create(&threads[i], NULL, caller, &theirs[i]);
    }
    if (enqueue(&mine, LAUNCHES) != 0) {
        printf("enqueue failed: %s\n", aclGetRecentErrMsg());
        return 13;
    }
    printf("queued\n");
    fflush(stdout);
    fprintf(stderr, "exiting\n");
    if (strcmp(mode, "finalize") == 0) return aclFinalize() == 0 ? 0 : 14;
    if (strcmp(mode, "exit") == 0) exit(7);
    return 0;
}
