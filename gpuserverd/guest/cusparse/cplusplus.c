/* gpucloud's libcusparse.so.12: the half-precision pruning functions cusparse.h declares for C++ only
 * (inside #if defined(__cplusplus), so apigen's C extraction does not see them). NVIDIA's library
 * exports them; so does this one, answering CUSPARSE_STATUS_NOT_SUPPORTED once on stderr. */
#include "internal.h"

GC_NOT_REMOTED_AS(cusparseHpruneCsr2csr, 10)
GC_NOT_REMOTED_AS(cusparseHpruneCsr2csrByPercentage, 10)
GC_NOT_REMOTED_AS(cusparseHpruneCsr2csrByPercentage_bufferSizeExt, 10)
GC_NOT_REMOTED_AS(cusparseHpruneCsr2csrNnz, 10)
GC_NOT_REMOTED_AS(cusparseHpruneCsr2csrNnzByPercentage, 10)
GC_NOT_REMOTED_AS(cusparseHpruneCsr2csr_bufferSizeExt, 10)
GC_NOT_REMOTED_AS(cusparseHpruneDense2csr, 10)
GC_NOT_REMOTED_AS(cusparseHpruneDense2csrByPercentage, 10)
GC_NOT_REMOTED_AS(cusparseHpruneDense2csrByPercentage_bufferSizeExt, 10)
GC_NOT_REMOTED_AS(cusparseHpruneDense2csrNnz, 10)
GC_NOT_REMOTED_AS(cusparseHpruneDense2csrNnzByPercentage, 10)
GC_NOT_REMOTED_AS(cusparseHpruneDense2csr_bufferSizeExt, 10)
