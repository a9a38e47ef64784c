/* AscendCL umbrella header: initialisation plus the base and runtime subsets. */
#ifndef XLOSS_ACL_ACL_H_
#define XLOSS_ACL_ACL_H_

#include "acl_base.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Once per process; a second call returns ACL_ERROR_REPEAT_INITIALIZE. configPath may be NULL. */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif
