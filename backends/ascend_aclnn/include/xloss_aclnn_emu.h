/* Helpers exported by the xloss host emulator only; NOT part of the CANN ABI. Programs that
 * must also run against vendor libraries should look them up optionally (weak symbols, dlsym). */
#ifndef XLOSS_ACLNN_EMU_H_
#define XLOSS_ACLNN_EMU_H_

#include "acl/acl.h"
#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    XLOSS_EMU_LIVE_DEVICE_MEMORY = 0, /* aclrtMalloc blocks not yet aclrtFree'd */
    XLOSS_EMU_LIVE_TENSORS = 1,       /* aclTensor objects not yet destroyed */
    XLOSS_EMU_LIVE_EXECUTORS = 2,     /* executors neither consumed by a run nor destroyed */
    XLOSS_EMU_LIVE_STREAMS = 3,       /* streams not yet destroyed */
    XLOSS_EMU_LIVE_ALL = 4            /* the sum of the above */
} xlossEmuLiveKind;

/* Number of live objects of the given kind (-1 for an unknown kind). */
ACL_FUNC_VISIBILITY int64_t xlossEmuLiveAllocations(int32_t kind);

/* Convert n elements between FLOAT, FLOAT16 and BF16 (round-to-nearest-even), host memory. */
ACL_FUNC_VISIBILITY aclError xlossEmuCast(const void *src, aclDataType srcType, void *dst, aclDataType dstType,
                                          uint64_t n);

/* A version string identifying the emulator. */
ACL_FUNC_VISIBILITY const char *xlossEmuVersion(void);

#ifdef __cplusplus
}
#endif

#endif
