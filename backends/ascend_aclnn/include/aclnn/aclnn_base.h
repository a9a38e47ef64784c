/* Compatibility header: aclnn base declarations live in acl_meta.h. */
#ifndef XLOSS_ACLNN_ACLNN_BASE_H_
#define XLOSS_ACLNN_ACLNN_BASE_H_

#include "acl_meta.h"

#endif
