/* cuRAND's host tables: the direction vectors and scramble constants a program copies to the
 * device for its own quasi-random kernels (curand_kernel.h's curand_init of a Sobol' state).
 * NVIDIA's library answers with pointers to arrays inside itself; here each table is asked of the
 * server's NVIDIA libcurand once (wire RandTable: copied into device scratch, read out), kept for
 * the life of the process, and the same pointer given on every later call, as NVIDIA's is. So the
 * numbers are NVIDIA's, whatever build of gpucloud: none is written into this library. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

enum { SCRAMBLE32 = 1, SCRAMBLE64 = 2, FIRST_SET = 101, LAST_SET = 104 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *tables[6]; /* sets 101-104, then the scramble constants of 32 and 64 bits */

static int slot(uint32_t table) {
    if (table >= FIRST_SET && table <= LAST_SET) return (int)(table - FIRST_SET);
    if (table == SCRAMBLE32 || table == SCRAMBLE64) return 4 + (int)(table - SCRAMBLE32);
    return -1;
}

/* fetch_locked asks the server for table: its size, then its bytes through device scratch. */
static int fetch_locked(uint32_t table, void **out) {
    uint64_t size = 0;
    int st = gc_rand_table_request(table, 0, 0, &size);
    if (st != CURAND_STATUS_SUCCESS) return st;
    if (size == 0 || size > (64u << 20)) return CURAND_STATUS_INTERNAL_ERROR; /* 10 MB the largest */
    void *host = malloc(size);
    CUdeviceptr scratch;
    if (!host || cuMemAlloc(&scratch, size) != CUDA_SUCCESS) {
        free(host);
        return CURAND_STATUS_ALLOCATION_FAILED;
    }
    uint64_t again;
    st = gc_rand_table_request(table, scratch, size, &again);
    if (st == CURAND_STATUS_SUCCESS && (again != size || cuMemcpyDtoH(host, scratch, size) != CUDA_SUCCESS))
        st = CURAND_STATUS_INTERNAL_ERROR;
    cuMemFree(scratch);
    if (st != CURAND_STATUS_SUCCESS) {
        free(host);
        return st;
    }
    *out = host;
    return CURAND_STATUS_SUCCESS;
}

static int table_of(uint32_t table, void **out) {
    if (!out) return CURAND_STATUS_OUT_OF_RANGE;
    int i = slot(table);
    if (i < 0) return CURAND_STATUS_OUT_OF_RANGE;
    pthread_mutex_lock(&mu);
    int st = tables[i] ? CURAND_STATUS_SUCCESS : fetch_locked(table, &tables[i]);
    if (st == CURAND_STATUS_SUCCESS) *out = tables[i];
    pthread_mutex_unlock(&mu);
    return st;
}

/* The 32-bit sets are 101 and 102, the 64-bit ones 103 and 104: NVIDIA refuses a set of the
 * other width. */
EXPORT int curandGetDirectionVectors32(void **vectors, int set) {
    if (set != FIRST_SET && set != FIRST_SET + 1) return CURAND_STATUS_OUT_OF_RANGE;
    return table_of((uint32_t)set, vectors);
}
EXPORT int curandGetDirectionVectors64(void **vectors, int set) {
    if (set != FIRST_SET + 2 && set != FIRST_SET + 3) return CURAND_STATUS_OUT_OF_RANGE;
    return table_of((uint32_t)set, vectors);
}
EXPORT int curandGetScrambleConstants32(void **constants) { return table_of(SCRAMBLE32, constants); }
EXPORT int curandGetScrambleConstants64(void **constants) { return table_of(SCRAMBLE64, constants); }
