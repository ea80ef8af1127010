# What gpucloud's libcusparse, libcufft and libcurand build alike (each folder's Makefile sets
# LIB, SONAME and SRC, then includes this): a library remoted to gpuserverd through the generic
# library call. It needs no NVIDIA header (calls_gen.c is generated from NVIDIA's header by
# gpuserverd/apigen), includes the guest library's generated wire code and links the driver API
# by its soname only: at run time it must find gpucloud's guest libcuda.so.1, and refuses (saying
# so) over any other.
CC      ?= cc
BUILD   ?= build
CFLAGS  ?= -O2 -g -Wall -Wextra
INC     ?= -I../include
LIBDIRS ?=
SRCS    := $(SRC) calls_gen.c ../wire_gen.c

$(BUILD)/$(SONAME): $(SRCS) internal.h lib$(LIB).map ../wire_gen.h ../include/gpucloud_private.h ../include/gpucloud_table.h ../include/gpucloud_libcall.h ../mathlib.mk
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -std=gnu11 -fPIC -shared -fvisibility=hidden -pthread $(INC) \
		-Wl,-soname,$(SONAME) -Wl,--version-script=lib$(LIB).map -o $@ $(SRCS) $(LIBDIRS) -lcuda
	ln -sf $(SONAME) $(BUILD)/lib$(LIB).so

clean:
	rm -rf $(BUILD)

.PHONY: clean
