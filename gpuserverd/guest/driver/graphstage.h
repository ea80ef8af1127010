/* Executable graphs with host nodes, launched by stages (graphstage.c). */
#ifndef GPUCLOUD_DRIVER_GRAPHSTAGE_H
#define GPUCLOUD_DRIVER_GRAPHSTAGE_H
#include "families.h"

/* After x was instantiated or updated: asks how x is launched, when host nodes were ever made. */
CUresult gc_stage_instantiated(CUgraphExec x);
CUresult gc_stage_updated(CUgraphExec x);
void gc_stage_forget(CUgraphExec x);
/* How many stages x is launched in (0: whole, by cuGraphLaunch's message). */
unsigned gc_stage_count(CUgraphExec x);
/* cuGraphLaunch of x by stages, running its host nodes here between them. */
CUresult gc_stage_launch(CUgraphExec x, CUstream s);

#endif
