/* AscendCL umbrella header. In CANN (runtime include/external/acl/acl.h) it includes acl_rt.h,
 * which declares aclInit/aclFinalize, plus the model and op headers this subset leaves out. */
#ifndef XLOSS_ACL_ACL_H_
#define XLOSS_ACL_ACL_H_

#include "acl_rt.h"

#endif
