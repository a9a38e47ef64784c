"""The C declarations the adapter gives cffi (the prototypes read from ``include/``, the types they
use written here; a test compiles each prototype against the headers), the enum values, and the
status-code names."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...dtypes import BFLOAT16
from ..prototypes import prototypes

# cffi's spelling of the headers' types (their enums as int, the tensor and executor opaque), and the
# emulator's operand struct and kernel type, which its prototypes use: types, not prototypes
PRELUDE = """
typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;
typedef uint16_t aclFloat16;
typedef int aclDataType;
typedef int aclFormat;
typedef int aclrtMemMallocPolicy;
typedef int aclrtMemcpyKind;
typedef struct aclTensor aclTensor;
typedef struct aclOpExecutor aclOpExecutor;
typedef struct {
    aclDataType dataType;
    aclFormat format;
    uint64_t viewDimsNum;
    int64_t viewDims[8];
    int64_t strides[8];
    int64_t offset;
    int64_t numel;
    int64_t storageNumel;
    void *data;
    const char *name;
} xlossEmuTensorDesc;
typedef aclnnStatus (*xlossEmuKernel)(const void *plan, void *workspace, uint64_t workspaceSize);
"""
INCLUDE = Path(__file__).resolve().with_name("include")
#: the headers whose ACL_FUNC_VISIBILITY prototypes cffi gets: the runtime, tensors and executors,
#: every operator (include/aclnnop), and the emulator's own functions
HEADERS = (INCLUDE / "acl" / "acl_base.h", INCLUDE / "acl" / "acl_rt.h", INCLUDE / "aclnn" / "acl_meta.h",
           INCLUDE / "aclnn" / "aclnn_base.h", *sorted((INCLUDE / "aclnnop").glob("*.h")), INCLUDE / "xloss_aclnn_emu.h")
#: the declarations the adapter gives cffi: one prototype a line (phase_one_parameters reads them)
CDEF = PRELUDE + prototypes(HEADERS, "ACL_FUNC_VISIBILITY")

# aclDataType
ACL_FLOAT, ACL_FLOAT16, ACL_INT8, ACL_INT32, ACL_UINT8 = 0, 1, 2, 3, 4
ACL_INT16, ACL_INT64, ACL_DOUBLE, ACL_BOOL, ACL_BF16 = 6, 9, 11, 12, 27
# aclFormat
ACL_FORMAT_NCHW, ACL_FORMAT_NHWC, ACL_FORMAT_ND, ACL_FORMAT_FRACTAL_NZ = 0, 1, 2, 29
# aclrtMemMallocPolicy, aclrtMemcpyKind
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEVICE_TO_DEVICE = 0, 1, 2, 3
# xlossEmuLiveKind (emulator only)
LIVE_DEVICE_MEMORY, LIVE_TENSORS, LIVE_EXECUTORS, LIVE_STREAMS, LIVE_ALL = 0, 1, 2, 3, 4
# xloss_aclnn_emu.h limits
EMU_MAX_DIMS, EMU_MAX_OPERANDS, EMU_MAX_PLAN = 8, 16, 1 << 20

#: NumPy dtype -> aclDataType
ACL_DTYPES = {
    np.dtype(np.float32): ACL_FLOAT,
    np.dtype(np.float16): ACL_FLOAT16,
    BFLOAT16: ACL_BF16,
    np.dtype(np.float64): ACL_DOUBLE,
    np.dtype(np.int8): ACL_INT8,
    np.dtype(np.int16): ACL_INT16,
    np.dtype(np.int32): ACL_INT32,
    np.dtype(np.int64): ACL_INT64,
    np.dtype(np.uint8): ACL_UINT8,
    np.dtype(np.bool_): ACL_BOOL,
}

ACL_SUCCESS = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_RUNTIME_ERROR = 361001

#: Status code -> symbolic name: aclnn statuses and the runtime (aclError) codes.
STATUS_NAMES = {
    0: "ACLNN_SUCCESS",
    161001: "ACLNN_ERR_PARAM_NULLPTR",
    161002: "ACLNN_ERR_PARAM_INVALID",
    361001: "ACLNN_ERR_RUNTIME_ERROR",
    561000: "ACLNN_ERR_INNER",
    561001: "ACLNN_ERR_INNER_INFERSHAPE_ERROR",
    561002: "ACLNN_ERR_INNER_TILING_ERROR",
    561003: "ACLNN_ERR_INNER_FIND_KERNEL_ERROR",
    561101: "ACLNN_ERR_INNER_CREATE_EXECUTOR",
    561102: "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR",
    561103: "ACLNN_ERR_INNER_NULLPTR",
    561104: "ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE",
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100003: "ACL_ERROR_INVALID_FILE",
    100037: "ACL_ERROR_REPEAT_FINALIZE",
    200000: "ACL_ERROR_BAD_ALLOC",
    200001: "ACL_ERROR_API_NOT_SUPPORT",
    200002: "ACL_ERROR_INVALID_DEVICE",
    200003: "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED",
    500000: "ACL_ERROR_INTERNAL_ERROR",
    500001: "ACL_ERROR_FAILURE",
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID",
    107002: "ACL_ERROR_RT_CONTEXT_NULL",
    107003: "ACL_ERROR_RT_STREAM_CONTEXT",
    107008: "ACL_ERROR_RT_ADDR_UNALIGNED",
    107017: "ACL_ERROR_RT_INVALID_HANDLE",
    207000: "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION",
    207002: "ACL_ERROR_RT_MEMORY_FREE",
    207004: "ACL_ERROR_RT_NO_DEVICE",
    507000: "ACL_ERROR_RT_INTERNAL_ERROR",
}


def phase_one_parameters() -> dict:
    """``{operator: (parameter names before workspaceSize)}`` for every ``aclnn*GetWorkspaceSize``
    of :data:`CDEF`: the ABI's own names, used to name the buffer a library overran."""
    out = {}
    for line in CDEF.splitlines():
        head, _, rest = line.partition("GetWorkspaceSize(")
        if not rest or not head.split()[-1].startswith("aclnn"):
            continue
        params = [p.strip().split()[-1].lstrip("*") for p in rest.rstrip(");").split(",")]
        out[head.split()[-1]] = tuple(p for p in params if p not in ("workspaceSize", "executor"))
    return out


def status_name(code: int) -> str:
    if code in STATUS_NAMES:
        return STATUS_NAMES[code]
    if 561000 <= code < 562000:  # CANN's internal-error range; only 561000 and 561103 are named here
        return f"ACLNN_ERR_INNER ({code})"
    return f"UNKNOWN_STATUS_{code}"
