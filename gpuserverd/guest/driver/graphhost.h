/* Graphs whose copies touch the program's pageable host memory: bounce buffers (graphhost.c). */
#ifndef GPUCLOUD_DRIVER_GRAPHHOST_H
#define GPUCLOUD_DRIVER_GRAPHHOST_H
#include "families.h"

struct gc_hostcopy;

/* Whether a capture begun in this process may be under way (graph.c). */
int gc_any_capturing(void);
/* Whether stream s captures (the stream a capture began on, or one that joined it through an
 * event), and the capture's id. */
int gc_graphhost_capturing(CUstream s, uint64_t *id);
/* A copy between host memory outside the arena and device address dev on stream s, which
 * captures (api_memory.c): captured as a device copy with a bounce buffer. */
CUresult gc_graphhost_capture_copy(int to_device, CUstream s, uint64_t capture, CUdeviceptr dev, void *host,
                                   size_t n);
/* The id of the capture on s when host copies were captured (asked before it ends), else 0. */
uint64_t gc_graphhost_capture_id(CUstream s);
/* That capture ended: its host copies go to graph g (NULL: the capture failed, they are dropped).
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when one of them failed: the graph lacks it. */
CUresult gc_graphhost_capture_end(uint64_t capture, CUgraph g);

/* cuGraphAddMemcpyNode: a host side of src or dst becomes a bounce buffer (*out, NULL when neither
 * side is host memory); node_done gives it to graph g once the node is added (rc success). */
CUresult gc_graphhost_node_prepare(struct gc_side *src, struct gc_side *dst, size_t w, size_t h, size_t d,
                                   struct gc_hostcopy **out);
void gc_graphhost_node_done(CUgraph g, CUgraphNode node, struct gc_hostcopy *c, CUresult rc);
/* cuGraphClone: clone holds g's copies too; pairs (npairs of them) name each node of g, then its
 * clone's. */
void gc_graphhost_cloned(CUgraph g, CUgraph clone, const uint64_t *pairs, size_t npairs);

void gc_graphhost_instantiated(CUgraph g, CUgraphExec x);
void gc_graphhost_exec_updated(CUgraphExec x, CUgraph g);
void gc_graphhost_graph_destroyed(CUgraph g);
void gc_graphhost_exec_destroyed(CUgraphExec x);

/* Around cuGraphLaunch(x, s): host bytes into the bounce buffers before, out of them after. */
CUresult gc_graphhost_before_launch(CUgraphExec x, CUstream s);
CUresult gc_graphhost_after_launch(CUgraphExec x, CUstream s);
/* The same for one stage of a launch by stages (graphstage.c): the copies of that stage. */
CUresult gc_graphhost_move_stage(CUgraphExec x, CUstream s, int to_device, int stage, int last);

/* Executable graphs with host nodes (graphstage.c): the stage node (of x's graph) runs in, or -1
 * when x is launched whole or node is not its. */
int gc_stage_of(CUgraphExec x, uint64_t node);
/* A host side in the shared arena as the arena's device address (graph.c). */
void gc_graph_arena_side(struct gc_side *s, size_t w, size_t h, size_t d);

#endif
