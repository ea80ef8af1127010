/* A stand-in for a Python extension such as torch's libc10_cuda.so: it needs libcudart.so.13 and
 * carries a DT_RPATH to the decoy's folder; rpath_probe dlopens it as Python does. */
int cudaRuntimeGetVersion(int *);

int ext_runtime_version(void) {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    return v;
}
