/*
 * fake_libcuda.c: a fake CUDA driver for testing cacheagent's purego binding
 * (gpu/cuda) and the cuda backend without a GPU. Build:
 *
 *     gcc -shared -fPIC -o libcuda.so.1 fake_libcuda.c -lpthread
 *
 * It implements, with host memory, exactly the functions the binding uses,
 * with the cuda.h signatures, and checks what a real driver would reject:
 * calls before cuInit (3), calls without a current context on the calling
 * OS thread (201: the context is thread-local here too), copies outside an
 * allocation (1), overlapping registrations (712), unregistering what is not
 * registered (713), unknown handles (400). "Device memory" is malloc'd host
 * memory; copies happen at once, so every event is complete unless
 * fakecuda_set_pending says otherwise.
 *
 * Test controls (not part of CUDA):
 *   fakecuda_fail(name, code, count)  next count calls of name return code
 *                                     (count -1: every call)
 *   fakecuda_calls(name)              calls of name so far
 *   fakecuda_last_flags(name)         flags of the last call of name
 *   fakecuda_live(kind)               live objects of a kind (FAKE_*)
 *   fakecuda_set_devices(n)           device count (default 1, max 8)
 *   fakecuda_set_pending(n)           next n cuEventQuery calls: NOT_READY
 *
 * -DFAKECUDA_OMIT_MEMALLOC leaves cuMemAlloc_v2 out, for the missing-symbol
 * test.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

enum {
	OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3,
	NO_DEVICE = 100, INVALID_DEVICE = 101, INVALID_CONTEXT = 201,
	INVALID_HANDLE = 400, NOT_READY = 600, ALREADY_REGISTERED = 712,
	NOT_REGISTERED = 713,
};

/* Object kinds, for fakecuda_live. */
enum { FAKE_DEVMEM, FAKE_HOSTMEM, FAKE_REGISTERED, FAKE_STREAM, FAKE_EVENT, FAKE_CTX_REFS, FAKE_LEAKED, FAKE_KINDS };

#define MAX_DEV 8
#define MAX_OBJ 4096
#define MAX_REC 64
#define DEV_MEM (16ULL << 30)

struct ctx { int dev; int refs; };
struct obj { int used, kind, dev; char *p; size_t n; struct timespec t; int recorded; };
struct rec { const char *name; long calls; int fail_code, fail_count; unsigned last_flags; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static int initialized, ndevices = 1, pending;
static long leaked;
static unsigned long long allocated[MAX_DEV];
static struct ctx ctxs[MAX_DEV];
static struct obj objs[MAX_OBJ];
static struct rec recs[MAX_REC];
static int nrecs;
static __thread struct ctx *current; /* per OS thread, as in CUDA */

static struct rec *rec_of(const char *name) {
	for (int i = 0; i < nrecs; i++)
		if (strcmp(recs[i].name, name) == 0)
			return &recs[i];
	if (nrecs == MAX_REC)
		abort();
	recs[nrecs].name = strdup(name);
	return &recs[nrecs++];
}

/* enter records a call of name and returns an injected failure, or OK. */
static int enter(const char *name, unsigned flags) {
	pthread_mutex_lock(&mu);
	struct rec *r = rec_of(name);
	r->calls++;
	r->last_flags = flags;
	int code = OK;
	if (r->fail_count != 0) {
		code = r->fail_code;
		if (r->fail_count > 0)
			r->fail_count--;
	}
	pthread_mutex_unlock(&mu);
	return code;
}

#define ENTER(flags) do { int c_ = enter(__func__, flags); if (c_) return c_; } while (0)
#define NEED_INIT() do { if (!initialized) return NOT_INITIALIZED; } while (0)
#define NEED_CTX() do { NEED_INIT(); if (!current || current->refs <= 0) return INVALID_CONTEXT; } while (0)

/* The helpers below run with mu held. */
static struct obj *add(int kind, void *p, size_t n) {
	for (int i = 0; i < MAX_OBJ; i++)
		if (!objs[i].used) {
			objs[i] = (struct obj){.used = 1, .kind = kind, .dev = current ? current->dev : -1, .p = p, .n = n};
			return &objs[i];
		}
	return NULL;
}

static struct obj *find(int kind, const void *p) {
	for (int i = 0; i < MAX_OBJ; i++)
		if (objs[i].used && objs[i].kind == kind && objs[i].p == p)
			return &objs[i];
	return NULL;
}

/* within returns the object of kind containing [p, p+n), or NULL. */
static struct obj *within(int kind, const char *p, size_t n) {
	for (int i = 0; i < MAX_OBJ; i++)
		if (objs[i].used && objs[i].kind == kind && p >= objs[i].p && p + n <= objs[i].p + objs[i].n)
			return &objs[i];
	return NULL;
}

static int overlaps(int kind, const char *p, size_t n) {
	for (int i = 0; i < MAX_OBJ; i++)
		if (objs[i].used && objs[i].kind == kind && p < objs[i].p + objs[i].n && objs[i].p < p + n)
			return 1;
	return 0;
}

static int valid_stream(CUstream s) { return s == NULL || find(FAKE_STREAM, s) != NULL; }

CUresult cuInit(unsigned flags) {
	ENTER(flags);
	if (flags != 0)
		return INVALID_VALUE;
	pthread_mutex_lock(&mu);
	initialized = 1;
	int n = ndevices;
	pthread_mutex_unlock(&mu);
	return n > 0 ? OK : NO_DEVICE;
}

CUresult cuDriverGetVersion(int *v) {
	ENTER(0);
	if (!v)
		return INVALID_VALUE;
	*v = 12060;
	return OK;
}

static const struct { int code; const char *name; } names[] = {
	{OK, "CUDA_SUCCESS"}, {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
	{OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"}, {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
	{NO_DEVICE, "CUDA_ERROR_NO_DEVICE"}, {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
	{INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"}, {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
	{NOT_READY, "CUDA_ERROR_NOT_READY"}, {ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
	{NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"}, {801, "CUDA_ERROR_NOT_SUPPORTED"},
	{803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"}, {34, "CUDA_ERROR_STUB_LIBRARY"},
};

CUresult cuGetErrorName(CUresult code, const char **s) {
	ENTER(0);
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].code == code) {
			*s = names[i].name;
			return OK;
		}
	*s = NULL;
	return INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *n) {
	ENTER(0);
	NEED_INIT();
	*n = ndevices;
	return OK;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	ENTER(0);
	NEED_INIT();
	if (ordinal < 0 || ordinal >= ndevices)
		return INVALID_DEVICE;
	*d = ordinal;
	return OK;
}

#define NEED_DEV(d) do { NEED_INIT(); if ((d) < 0 || (d) >= ndevices) return INVALID_DEVICE; } while (0)

CUresult cuDeviceGetName(char *buf, int n, CUdevice d) {
	ENTER(0);
	NEED_DEV(d);
	if (!buf || n <= 0)
		return INVALID_VALUE;
	snprintf(buf, n, "Fake CUDA Device %d", d);
	return OK;
}

CUresult cuDeviceGetPCIBusId(char *buf, int n, CUdevice d) {
	ENTER(0);
	NEED_DEV(d);
	if (!buf || n < 13)
		return INVALID_VALUE;
	snprintf(buf, n, "0000:%02X:00.0", 0x19 + d);
	return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	ENTER(0);
	NEED_DEV(d);
	if (attr < 1 || attr > 150)
		return INVALID_VALUE;
	switch (attr) {
	case 19: case 41: case 99: case 113: *v = 1; break; /* map host, UVA, register, read-only register */
	case 33: *v = 0x19 + d; break;                        /* PCI bus */
	case 40: *v = 2; break;                               /* async engines */
	case 134: *v = -1; break;                             /* host NUMA id */
	default: *v = 0;
	}
	return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *n, CUdevice d) {
	ENTER(0);
	NEED_DEV(d);
	*n = DEV_MEM;
	return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	ENTER(0);
	NEED_DEV(d);
	pthread_mutex_lock(&mu);
	ctxs[d].dev = d;
	ctxs[d].refs++;
	pthread_mutex_unlock(&mu);
	*c = &ctxs[d];
	return OK;
}

/* Releasing the last reference destroys the context and what it holds, as
 * CUDA does; objects still alive then are counted as leaked. */
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	ENTER(0);
	NEED_DEV(d);
	pthread_mutex_lock(&mu);
	int rc = OK;
	if (ctxs[d].refs <= 0)
		rc = INVALID_CONTEXT;
	else if (--ctxs[d].refs == 0) {
		for (int i = 0; i < MAX_OBJ; i++)
			if (objs[i].used && objs[i].dev == d) {
				leaked++;
				objs[i].used = 0;
			}
		allocated[d] = 0;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuCtxSetCurrent(CUcontext c) {
	ENTER(0);
	NEED_INIT();
	current = c;
	return OK;
}

CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	*free_ = DEV_MEM - allocated[current->dev];
	*total = DEV_MEM;
	pthread_mutex_unlock(&mu);
	return OK;
}

#ifndef FAKECUDA_OMIT_MEMALLOC
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	ENTER(0);
	NEED_CTX();
	if (n == 0)
		return INVALID_VALUE;
	pthread_mutex_lock(&mu);
	int rc = OUT_OF_MEMORY;
	char *m = NULL;
	if (n <= DEV_MEM - allocated[current->dev] && (m = malloc(n)) && add(FAKE_DEVMEM, m, n)) {
		allocated[current->dev] += n;
		*p = (CUdeviceptr)m;
		rc = OK;
	} else if (m)
		free(m);
	pthread_mutex_unlock(&mu);
	return rc;
}
#endif

CUresult cuMemFree_v2(CUdeviceptr p) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct obj *o = find(FAKE_DEVMEM, (void *)p);
	if (o) {
		allocated[o->dev] -= o->n;
		free(o->p);
		o->used = 0;
	}
	pthread_mutex_unlock(&mu);
	return o ? OK : INVALID_VALUE;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
	ENTER(flags);
	NEED_CTX();
	if (n == 0 || flags > 7)
		return INVALID_VALUE;
	pthread_mutex_lock(&mu);
	int rc = OUT_OF_MEMORY;
	void *m = NULL;
	if (posix_memalign(&m, 4096, n) == 0 && add(FAKE_HOSTMEM, m, n)) {
		*p = m;
		rc = OK;
	} else
		free(m);
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuMemFreeHost(void *p) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct obj *o = find(FAKE_HOSTMEM, p);
	if (o) {
		free(o->p);
		o->used = 0;
	}
	pthread_mutex_unlock(&mu);
	return o ? OK : INVALID_VALUE;
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
	ENTER(flags);
	NEED_CTX();
	if (!p || n == 0 || flags > 15)
		return INVALID_VALUE;
	pthread_mutex_lock(&mu);
	int rc = OK;
	if (overlaps(FAKE_REGISTERED, p, n) || overlaps(FAKE_HOSTMEM, p, n))
		rc = ALREADY_REGISTERED;
	else if (!add(FAKE_REGISTERED, p, n))
		rc = OUT_OF_MEMORY;
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuMemHostUnregister(void *p) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct obj *o = find(FAKE_REGISTERED, p);
	if (o)
		o->used = 0;
	pthread_mutex_unlock(&mu);
	return o ? OK : NOT_REGISTERED;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	int rc = OK;
	if (!src || !valid_stream(s))
		rc = !src ? INVALID_VALUE : INVALID_HANDLE;
	else if (!within(FAKE_DEVMEM, (char *)dst, n))
		rc = INVALID_VALUE;
	pthread_mutex_unlock(&mu);
	if (rc == OK)
		memcpy((void *)dst, src, n);
	return rc;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	int rc = dst && within(FAKE_DEVMEM, (char *)src, n) ? OK : INVALID_VALUE;
	pthread_mutex_unlock(&mu);
	if (rc == OK)
		memcpy(dst, (void *)src, n);
	return rc;
}

/* Streams and events are one-byte allocations, so handles are unique. */
static CUresult create(int kind, void **h) {
	pthread_mutex_lock(&mu);
	void *m = malloc(1);
	int rc = m && add(kind, m, 1) ? OK : OUT_OF_MEMORY;
	if (rc == OK)
		*h = m;
	else
		free(m);
	pthread_mutex_unlock(&mu);
	return rc;
}

static CUresult destroy(int kind, void *h) {
	pthread_mutex_lock(&mu);
	struct obj *o = find(kind, h);
	if (o) {
		free(o->p);
		o->used = 0;
	}
	pthread_mutex_unlock(&mu);
	return o ? OK : INVALID_HANDLE;
}

CUresult cuStreamCreate(CUstream *s, unsigned flags) {
	ENTER(flags);
	NEED_CTX();
	return flags > 1 ? INVALID_VALUE : create(FAKE_STREAM, s);
}

CUresult cuStreamSynchronize(CUstream s) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	int ok = valid_stream(s);
	pthread_mutex_unlock(&mu);
	return ok ? OK : INVALID_HANDLE;
}

CUresult cuStreamDestroy_v2(CUstream s) {
	ENTER(0);
	NEED_CTX();
	return destroy(FAKE_STREAM, s);
}

CUresult cuEventCreate(CUevent *e, unsigned flags) {
	ENTER(flags);
	NEED_CTX();
	return flags > 7 ? INVALID_VALUE : create(FAKE_EVENT, e);
}

CUresult cuEventRecord(CUevent e, CUstream s) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct obj *o = find(FAKE_EVENT, e);
	int rc = o && valid_stream(s) ? OK : INVALID_HANDLE;
	if (o) {
		clock_gettime(CLOCK_MONOTONIC, &o->t);
		o->recorded = 1;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuEventQuery(CUevent e) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	int rc = find(FAKE_EVENT, e) ? OK : INVALID_HANDLE;
	if (rc == OK && pending > 0) {
		pending--;
		rc = NOT_READY;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuEventSynchronize(CUevent e) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	int rc = find(FAKE_EVENT, e) ? OK : INVALID_HANDLE;
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuEventDestroy_v2(CUevent e) {
	ENTER(0);
	NEED_CTX();
	return destroy(FAKE_EVENT, e);
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
	ENTER(0);
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct obj *a = find(FAKE_EVENT, start), *b = find(FAKE_EVENT, end);
	int rc = a && b ? (a->recorded && b->recorded ? OK : NOT_READY) : INVALID_HANDLE;
	if (rc == OK)
		*ms = (b->t.tv_sec - a->t.tv_sec) * 1e3f + (b->t.tv_nsec - a->t.tv_nsec) / 1e6f;
	pthread_mutex_unlock(&mu);
	return rc;
}

/* Test controls. */

void fakecuda_fail(const char *name, int code, int count) {
	pthread_mutex_lock(&mu);
	struct rec *r = rec_of(name);
	r->fail_code = code;
	r->fail_count = count;
	pthread_mutex_unlock(&mu);
}

long fakecuda_calls(const char *name) {
	pthread_mutex_lock(&mu);
	long n = rec_of(name)->calls;
	pthread_mutex_unlock(&mu);
	return n;
}

unsigned fakecuda_last_flags(const char *name) {
	pthread_mutex_lock(&mu);
	unsigned f = rec_of(name)->last_flags;
	pthread_mutex_unlock(&mu);
	return f;
}

long fakecuda_live(int kind) {
	long n = 0;
	pthread_mutex_lock(&mu);
	if (kind == FAKE_CTX_REFS)
		for (int d = 0; d < MAX_DEV; d++)
			n += ctxs[d].refs;
	else if (kind == FAKE_LEAKED)
		n = leaked;
	else
		for (int i = 0; i < MAX_OBJ; i++)
			n += objs[i].used && objs[i].kind == kind;
	pthread_mutex_unlock(&mu);
	return n;
}

void fakecuda_set_devices(int n) {
	pthread_mutex_lock(&mu);
	ndevices = n < 0 ? 0 : n > MAX_DEV ? MAX_DEV : n;
	pthread_mutex_unlock(&mu);
}

void fakecuda_set_pending(int n) {
	pthread_mutex_lock(&mu);
	pending = n;
	pthread_mutex_unlock(&mu);
}
