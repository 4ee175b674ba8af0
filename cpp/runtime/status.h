// One addition to the C ABI, kept out of the public header until the project decides to
// publish it: the status of this thread's last failure, so that callers of the functions that
// return NULL or -1 (tileaot_select, tileaot_lookup) can tell a miss from a driver error from
// bad arguments. The Python bindings use it to raise VariantMissError / DriverError / ValueError.
#ifndef TILEAOT_RUNTIME_STATUS_H_
#define TILEAOT_RUNTIME_STATUS_H_

#include "tileaot/tileaot.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status (enum tileaot_status) of the last failure on this thread; TILEAOT_OK if none. */
TILEAOT_API int tileaot_last_status(void);

#ifdef __cplusplus
}
#endif
#endif /* TILEAOT_RUNTIME_STATUS_H_ */
