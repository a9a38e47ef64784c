/* Phase-one helpers shared by the kernels. */
#ifndef XLOSS_EMU_OPS_COMMON_H_
#define XLOSS_EMU_OPS_COMMON_H_

#include <math.h>
#include <string.h>

#include "emu_internal.h"

/* Return ACLNN_ERR_PARAM_NULLPTR if a required pointer is NULL. */
#define EMU_REQUIRE(api, ptr, name)                                      \
    do {                                                                 \
        if (!(ptr)) {                                                    \
            emu_set_error("%s: %s is a null pointer", (api), (name));    \
            return ACLNN_ERR_PARAM_NULLPTR;                              \
        }                                                                \
    } while (0)

#define EMU_CHECK(expr)                  \
    do {                                 \
        aclnnStatus st_ = (expr);        \
        if (st_ != ACLNN_SUCCESS)        \
            return st_;                  \
    } while (0)

/* Formats without a private (fractal / C0-blocked) layout: the kernels treat them as ND. */
static inline int emu_plain_format(aclFormat f)
{
    return f == ACL_FORMAT_ND || f == ACL_FORMAT_NCHW || f == ACL_FORMAT_NHWC || f == ACL_FORMAT_NCDHW ||
           f == ACL_FORMAT_NDHWC || f == ACL_FORMAT_HWCN;
}

/* Snapshot operand `name` into slot k of the executor prototype. */
static inline aclnnStatus emu_operand(aclOpExecutor *ex, int k, const char *name, const aclTensor *t)
{
    ex->names[k] = name;
    if (k + 1 > ex->n)
        ex->n = k + 1;
    aclnnStatus st = emu_snapshot(ex->api, name, t, &ex->t[k]);
    if (st == ACLNN_SUCCESS && ex->t[k].present && !emu_plain_format(ex->t[k].format)) {
        emu_set_error("%s: %s has format %d; only ND-like formats (ND, NCHW, NHWC, NCDHW, NDHWC, HWCN) are "
                      "supported", ex->api, name, (int)ex->t[k].format);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return st;
}

static inline aclnnStatus emu_need_float(const aclOpExecutor *ex, int k)
{
    const emu_view *v = &ex->t[k];
    if (v->present && !emu_is_float_type(v->dtype)) {
        emu_set_error("%s: %s has dtype %s; expected FLOAT, FLOAT16 or BF16", ex->api, ex->names[k],
                      emu_dtype_name(v->dtype));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_dtype(const aclOpExecutor *ex, int k, aclDataType dt)
{
    const emu_view *v = &ex->t[k];
    if (v->present && v->dtype != dt) {
        emu_set_error("%s: %s has dtype %s; expected %s", ex->api, ex->names[k], emu_dtype_name(v->dtype),
                      emu_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_ndim(const aclOpExecutor *ex, int k, int ndim)
{
    const emu_view *v = &ex->t[k];
    if (v->present && v->ndim != ndim) {
        char b[160];
        emu_set_error("%s: %s must be %d-D; got shape %s", ex->api, ex->names[k], ndim,
                      emu_shape_str(v, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_broadcast(const aclOpExecutor *ex, int k, int to)
{
    const emu_view *v = &ex->t[k];
    if (v->present && !emu_broadcasts_to(v, &ex->t[to])) {
        char a[160], b[160];
        emu_set_error("%s: %s of shape %s does not broadcast to %s %s", ex->api, ex->names[k],
                      emu_shape_str(v, a, sizeof a), ex->names[to], emu_shape_str(&ex->t[to], b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_same_shape(const aclOpExecutor *ex, int k, int as)
{
    const emu_view *v = &ex->t[k];
    if (v->present && !emu_same_shape(v, &ex->t[as])) {
        char a[160], b[160];
        emu_set_error("%s: %s has shape %s; expected %s's shape %s", ex->api, ex->names[k],
                      emu_shape_str(v, a, sizeof a), ex->names[as], emu_shape_str(&ex->t[as], b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_reduction(const aclOpExecutor *ex, int64_t reduction)
{
    if (reduction < 0 || reduction > 2) {
        emu_set_error("%s: reduction %lld is not 0 (none), 1 (mean) or 2 (sum)", ex->api, (long long)reduction);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

/* Start of every phase one: outputs cleared so a failed call never leaves stale values. */
static inline void emu_phase_one_start(aclOpExecutor *proto, const char *api, uint64_t *workspaceSize,
                                       aclOpExecutor **executor)
{
    memset(proto, 0, sizeof *proto);
    proto->api = api;
    if (workspaceSize)
        *workspaceSize = 0;
    if (executor)
        *executor = NULL;
}

#endif
