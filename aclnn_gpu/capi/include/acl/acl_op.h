/* aclnn_gpu: CANN's acl/acl_op.h, the single-operator model (aclopExecuteV2, aclopCompile, ...).
 * That model loads operators compiled offline for an NPU; no such binaries run here, so this header
 * declares none of its functions: aclnn's two-phase operators (aclnnop/) are the way to run an
 * operator. It exists so that programs which include it, as CANN's samples do through acl/acl.h,
 * compile unchanged. */
#ifndef ACLNN_GPU_ACL_ACL_OP_H_
#define ACLNN_GPU_ACL_ACL_OP_H_

#include "acl_base.h"

#endif /* ACLNN_GPU_ACL_ACL_OP_H_ */
