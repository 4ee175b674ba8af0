/* tileaot: ahead-of-time compiled TileLang kernels, C ABI.
 *
 * Plain C, no CUDA headers needed: streams are passed as `void*` (a CUstream / cudaStream_t).
 * Every function returns 0 on success; on failure a non-zero code, and
 * tileaot_last_error() holds a message (thread-local) naming the op and variant.
 *
 * A call names an op and a key: the dtypes and modes of the call joined by commas, in the
 * order the op documents them (e.g. "bf16" for rms_norm, "bf16,g128" for
 * per_token_cast_fp8). The runtime picks the variant by the shapes and the device's SM.
 *
 * C++ code may include <tileaot/tileaot.hpp> instead: exceptions, tensor views (DLPack
 * DLTensors or plain pointers) and the checks the Python API makes, over these functions.
 */
#ifndef TILEAOT_TILEAOT_H_
#define TILEAOT_TILEAOT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TILEAOT_API __declspec(dllexport)
#else
#define TILEAOT_API __attribute__((visibility("default")))
#endif

enum tileaot_status {
  TILEAOT_OK = 0,
  TILEAOT_ERROR_INVALID = 1, /* bad arguments: wrong count, shape mismatch, misalignment */
  TILEAOT_ERROR_MISS = 2,    /* no variant built for this op/key/shape/GPU */
  TILEAOT_ERROR_DRIVER = 3,  /* CUDA driver missing or a driver call failed */
};

/* A handle for (op, key), or -1 (with tileaot_last_error set) if no variant has them. */
TILEAOT_API int32_t tileaot_lookup(const char* op, const char* key);

/* Launch on `stream` of CUDA device `device` (the primary context is used).
 * ptrs: n_tensors device pointers; shapes: the tensors' dims, concatenated in order;
 * scalars: the op's runtime scalars. */
TILEAOT_API int tileaot_launch(int32_t handle, int32_t device, void* stream,
                               const void* const* ptrs, int32_t n_tensors, const int64_t* shapes,
                               int32_t n_shapes, const double* scalars, int32_t n_scalars);

/* Name of the variant a launch with these shapes would use on `device`, without launching.
 * Returns NULL (with the error set) on a miss. */
TILEAOT_API const char* tileaot_select(int32_t handle, int32_t device, const int64_t* shapes,
                                       int32_t n_shapes);

/* Tensor parameter i of (op, key) `handle`: its name and its DLPack dtype packed as
 * code | bits << 8 | lanes << 16 (e.g. bf16 = 4 | 16 << 8 | 1 << 16). Every variant of a
 * handle shares these. Returns the tensor count, or -1 (error set) for a bad handle. Pass
 * i = -1 to get only the count. */
TILEAOT_API int32_t tileaot_tensor_param(int32_t handle, int32_t i, const char** name,
                                         uint32_t* dlpack_dtype);

/* Number of dims tensor parameter i of `handle` has (its shape values in a launch's
 * concatenated `shapes`), or -1 (error set) for a bad handle or index. */
TILEAOT_API int32_t tileaot_tensor_ndim(int32_t handle, int32_t i);

/* Bytes of scratch (device memory, 16-byte aligned) a launch of (op, key) needs, in *bytes:
 * shapes are the dims of the op's tensors less its scratch ones, concatenated in parameter
 * order (what tileaot_launch takes, without the scratch tensors' dims); 0 for an op without
 * scratch. Pass the workspace's pointer as the scratch tensors' data, or use <tileaot/ops.hpp>,
 * whose functions take one workspace and carve the scratch tensors out of it. */
TILEAOT_API int tileaot_workspace_size(const char* op, const char* key, const int64_t* shapes,
                                       int32_t n_shapes, int64_t* bytes);

/* "sm_90a"-style name of the SASS target family for device `device`, or NULL. */
TILEAOT_API const char* tileaot_device_arch(int32_t device);

/* Message for the last failure on this thread ("" if none). */
TILEAOT_API const char* tileaot_last_error(void);

/* Status (enum tileaot_status) of the last failure on this thread (TILEAOT_OK if none): tells
 * a miss from a driver error from bad arguments after a call that returned NULL or -1. */
TILEAOT_API int tileaot_last_status(void);

/* Archs and ops this library was built with ("sm_70,sm_75,..."; "*" = all ops). */
TILEAOT_API const char* tileaot_build_archs(void);
TILEAOT_API const char* tileaot_build_ops(void);

/* Table of variants for introspection: row i's fields, or NULL past the end. */
TILEAOT_API int32_t tileaot_num_variants(void);
TILEAOT_API const char* tileaot_variant_field(int32_t i, const char* field);

#ifdef __cplusplus
}
#endif
#endif /* TILEAOT_TILEAOT_H_ */
