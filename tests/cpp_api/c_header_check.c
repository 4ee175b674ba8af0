/* <tileaot/tileaot.h> compiles as plain C99 with no CUDA headers on the include path. */
#include <tileaot/tileaot.h>

int tileaot_header_check(void) { return tileaot_last_status() == TILEAOT_OK ? 0 : 1; }
