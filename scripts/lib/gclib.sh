# shellcheck shell=bash
# Sourced by the GPU-machine harnesses (gpu-torch.sh, gpu-samples.sh), from a torch-prep.sh bundle.
#
# worker_libraries: points the workers at NVIDIA's math libraries from torch's wheel (the same builds
# a native torch run uses), unless GPUSERVERD_<LIB> already names one; a library the wheel lacks
# (nvJPEG) from the toolkit (/usr/local/cuda/lib64), which the native samples use.
worker_libraries() {
	local site v n f
	site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
	for v in CUBLAS:cu13/lib/libcublas.so.13 CUBLASLT:cu13/lib/libcublasLt.so.13 CUDNN:cudnn/lib/libcudnn.so.9 \
		CUSOLVER:cu13/lib/libcusolver.so.12 CUSPARSE:cu13/lib/libcusparse.so.12 CUFFT:cu13/lib/libcufft.so.12 \
		CURAND:cu13/lib/libcurand.so.10 NVJPEG:cu13/lib/libnvjpeg.so.13; do
		n=GPUSERVERD_${v%%:*} f=$site/nvidia/${v#*:}
		[[ -e $f ]] || f=/usr/local/cuda/lib64/${v##*/}
		[[ -z ${!n:-} && -e $f ]] && export "$n=$f"
		echo "worker: $n=${!n:-unset, the loader finds it}"
	done
	[[ -z ${GPUSERVERD_NPP:-} && -e /usr/local/cuda/lib64/libnppc.so.13 ]] && export GPUSERVERD_NPP=/usr/local/cuda/lib64
	echo "worker: GPUSERVERD_NPP=${GPUSERVERD_NPP:-unset, the loader finds NPP}"
}

# guest_libdir ROOT WORK DEST: fills DEST with what /usr/lib/gpucloud holds in a VM. libcudart,
# libcublas and libcublasLt come from ROOT/prebuilt (PREBUILT=1; torch-prep.sh built them against
# the same headers) or are built in WORK against the toolkit; the rest were built by torch-prep.sh.
guest_libdir() {
	local root=$1 work=$2 dest=$3 lib d f
	mkdir -p "$dest"
	for lib in cudart:libcudart.so.13 cublas:libcublas.so.13 cublaslt:libcublasLt.so.13; do
		d=${lib%%:*} f=${lib#*:}
		if [[ ${PREBUILT:-} == 1 && -f $root/prebuilt/$f ]]; then
			cp "$root/prebuilt/$f" "$dest/"
			continue
		fi
		make -s -C "$root/gpuserverd/guest/$d" BUILD="$work/$d" && cp "$work/$d/$f" "$dest/" || echo "FAILED: build $f"
	done
	cp "$root/gpuserverd/guest/build/libcuda.so.1" "$root/gpuserverd/guest/cudnn/build/libcudnn.so.9" \
		"$root/gpuserverd/guest/nvml/build/libnvidia-ml.so.1" "$dest/"
	for lib in cusolver:libcusolver.so.12 cusparse:libcusparse.so.12 cufft:libcufft.so.12 curand:libcurand.so.10 \
		nvjpeg:libnvjpeg.so.13; do
		cp "$root/gpuserverd/guest/${lib%%:*}/build/${lib#*:}" "$dest/" || echo "FAILED: no prebuilt ${lib#*:}"
	done
	cp "$root"/gpuserverd/guest/npp/build/libnpp*.so.13 "$dest/" || echo "FAILED: no prebuilt NPP libraries"
}
