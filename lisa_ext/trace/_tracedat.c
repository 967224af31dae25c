/*
 * Native page decoder for trace.dat files (trace-cmd file versions 6 and 7).
 *
 * Mirrors the ring-buffer page layout of the kernel's
 * kernel/trace/ring_buffer.c as read by libtraceevent's kbuffer-parse.c:
 * a page header (u64 timestamp, local_t commit) followed by events whose
 * 32-bit header holds type_len:5 and time_delta:27 (little endian).
 * type_len 29 is padding, 30 a time extend, 31 an absolute time stamp,
 * 0 a record whose length is in the next word, 1..28 a record of
 * type_len * 4 bytes.
 *
 * Python (lisa_ext/trace/tracedat.py) parses the file headers and event
 * formats, and hands this module the per-CPU data regions and, per wanted
 * event, a compact description of its fields. The decoder merges the CPU
 * streams in timestamp order exactly like `trace-cmd report` (smallest
 * timestamp first, ties to the lowest stream), and appends each wanted
 * record to growable column buffers that become Arrow buffers without a
 * copy. All reads are bounds checked: damage stops the affected stream with
 * a warning naming the file offset; everything decoded before it is kept.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

/* Built with -fsanitize=address (make fuzz): buffers come from malloc, so that
 * AddressSanitizer knows their exact bounds (it cannot see inside mappings). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* ------------------------------------------------------------------ */
/* Buffer: decoder memory exposed through the buffer protocol.          */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    size_t mapped; /* size of the anonymous mapping holding data; 0: data is from malloc */
} BufferObject;

static void Buffer_dealloc(BufferObject *self)
{
    if (self->data && self->mapped)
        munmap(self->data, self->mapped);
    else
        free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : "",
                             self->len, 1, flags);
}

static Py_ssize_t Buffer_length(BufferObject *self) { return self->len; }

static PyBufferProcs Buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)Buffer_getbuffer,
};

static PySequenceMethods Buffer_as_sequence = {
    .sq_length = (lenfunc)Buffer_length,
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lisa_ext.trace._tracedat.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only memory owned by the decoder, handed to Arrow without a copy.",
};

/* ------------------------------------------------------------------ */
/* Growable byte vector. Small ones live on the heap (an event with one  */
/* record and forty columns costs bytes, not forty mappings); past       */
/* VEC_HEAP_MAX a vector moves to its own anonymous mapping: growing it   */
/* is then a mremap (no copy), and large ones use transparent huge pages  */
/* so that filling hundreds of MiB costs few page faults.                 */

typedef struct {
    char *p;
    size_t len;
    size_t cap;    /* bytes prefaulted and writable: the growth check */
    size_t mapped; /* size of the mapping; 0 while p is from malloc */
} Vec;

#define VEC_HEAP_MAX (64 * 1024)
#define VEC_POPULATE (1u << 20)

static int vec_grow(Vec *v, size_t need)
{
    if (need > SIZE_MAX / 4)
        return -1;
    if (UNDER_ASAN || (!v->mapped && need <= VEC_HEAP_MAX)) {
        size_t size = v->cap ? v->cap : 64;
        while (size < need)
            size *= 2;
        char *p = realloc(v->p, size);
        if (!p)
            return -1;
        v->p = p;
        v->cap = size;
        return 0;
    }
    if (need > v->mapped) {
        size_t size = v->mapped ? v->mapped : 2 * VEC_HEAP_MAX;
        while (size < need)
            size *= 2;
        void *p = v->mapped ? mremap(v->p, v->mapped, size, MREMAP_MAYMOVE)
                            : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return -1;
        if (!v->mapped && v->p) { /* leaving the heap */
            memcpy(p, v->p, v->len);
            free(v->p);
            v->cap = 0;
        }
        v->p = p;
        v->mapped = size;
    }
    /* Prefault ahead in 1 MiB steps: one call instead of 256 page faults. */
    size_t cap = v->cap;
    while (cap < need)
        cap += VEC_POPULATE;
    if (cap > v->mapped)
        cap = v->mapped;
#ifdef MADV_POPULATE_WRITE
    if (cap > v->cap)
        madvise(v->p + v->cap, cap - v->cap, MADV_POPULATE_WRITE); /* best effort: faults otherwise */
#endif
    v->cap = cap;
    return 0;
}

static inline int vec_reserve(Vec *v, size_t extra)
{
    if (v->len + extra <= v->cap)
        return 0;
    return vec_grow(v, v->len + extra);
}

/* Hot path appends: callers reserve first. */
#define VEC_PUT(v, src, n) (memcpy((v)->p + (v)->len, (src), (n)), (v)->len += (n))

static PyObject *vec_to_buffer(Vec *v)
{
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b)
        return NULL;
    b->data = v->p;
    b->len = (Py_ssize_t)v->len;
    b->mapped = v->mapped;
    v->p = NULL;
    v->len = v->cap = v->mapped = 0;
    return (PyObject *)b;
}

static void vec_free(Vec *v)
{
    if (v->p && v->mapped)
        munmap(v->p, v->mapped);
    else
        free(v->p);
    v->p = NULL;
    v->len = v->cap = v->mapped = 0;
}

/* The file, read-only: mapped, or under AddressSanitizer copied to the heap. */
static const uint8_t *map_file(int fd, uint64_t len)
{
    if (!len || len > (uint64_t)SIZE_MAX)
        return NULL;
    if (UNDER_ASAN) {
        uint8_t *p = malloc((size_t)len);
        size_t done = 0;
        while (p && done < len) {
            ssize_t r = pread(fd, p + done, (size_t)len - done, (off_t)done);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                free(p);
                return NULL;
            }
            done += (size_t)r;
        }
        return p;
    }
    void *m = mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void unmap_file(const uint8_t *map, uint64_t len)
{
    if (!map)
        return;
    if (UNDER_ASAN)
        free((void *)map);
    else
        munmap((void *)map, (size_t)len);
}

/* ------------------------------------------------------------------ */
/* Column descriptions (mirrors FIELD_* constants in tracedat.py).      */

enum {
    K_INT = 0,          /* fixed-width integer: size bytes copied */
    K_STR_FIXED = 1,    /* char[N]: string up to the first NUL */
    K_STR_DYN = 2,      /* __data_loc char[] */
    K_STR_REST = 3,     /* char buf[] (size 0): up to the end of the record */
    K_LIST_FIXED = 4,   /* T x[N], T not char */
    K_LIST_DYN = 5,     /* __data_loc T[] */
    K_LIST_REST = 6,    /* T buf[] (size 0) */
};

#define FLAG_REL_LOC 1   /* __rel_loc: offset relative to the end of the field */
#define FLAG_STRIP_NL 2  /* drop one trailing newline (ftrace print) */

typedef struct {
    int kind, flags;
    uint32_t offset, size, elem;
    Vec a; /* values (INT, list values) or string bytes */
    Vec o; /* int32 offsets for strings and lists */
    int32_t count; /* running end offset (elements or bytes) */
} Column;

typedef struct {
    int id;
    uint32_t pid_offset, pid_size;
    uint32_t min_len; /* bytes a record needs to hold every fixed-size field */
    int ncols;
    Column *cols;
    Vec ts, cpu, pid, comm_o, comm_d;
    int32_t comm_count;
    int64_t rows;
    int64_t short_records; /* records shorter than min_len: damaged, skipped */
    int overflow;
    int thread; /* which decoding thread appends this event */
} Slot;

/* ------------------------------------------------------------------ */
/* Per-stream cursor over a CPU's pages.                                */

enum { COMP_NONE = 0, COMP_ZLIB = 1, COMP_ZSTD = 2 };

typedef struct Cursor {
    int cpu;
    int fd;
    int comp;
    uint64_t off, end;       /* remaining region of the file */
    uint32_t chunks_left;
    int chunk_header_read;
    int damaged;             /* a damaged page ended the stream: load no more blocks */
    uint8_t *own;            /* decompressed block, owned */
    size_t own_cap;
    const uint8_t *buf;      /* current block of whole pages (own, or the file mapping) */
    size_t buf_len;
    uint64_t buf_file_off;   /* file offset of buf (uncompressed) or of its chunk */
    size_t page_at;          /* offset of the current page in buf */
    const uint8_t *data;     /* current page's event data */
    uint32_t data_len, pos;
    uint64_t ts;
    /* prefetched next chunk (compressed streams, filled by the helper thread) */
    uint8_t *pf_buf;
    size_t pf_cap, pf_len;
    uint64_t pf_off;
    int pf_ready, pf_status, pf_end;
    /* peeked record */
    int has;
    const uint8_t *rec;
    uint32_t rec_len;
    uint64_t rec_ts;
    int done;
    /* pages the kernel flagged as following lost events (RB_MISSED_EVENTS) */
    uint64_t lost_pages, lost_events, lost_unknown_pages;
    int64_t lost_first_ts, lost_last_ts;
} Cursor;

#define MAX_WARN 50

typedef struct Prefetch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    struct Cursor *cur;
    Py_ssize_t nstreams;
    struct Decoder *d;
    uint8_t *cbuf;
    size_t cbuf_cap;
    ZSTD_DCtx *zctx;
} Prefetch;

/* warn() may be called by the prefetch thread too */
static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct Decoder {
    const char *path;
    uint32_t page_size, hdr_size, commit_off, commit_size;
    uint64_t inflate_budget;  /* bytes all compressed chunks may still decompress to */
    char msgs[MAX_WARN][400]; /* filled without the GIL, turned into str afterwards */
    int nwarn;
    /* a decompression bomb: not damage a writer or a truncation produces, so the file is refused */
    int fatal;
    uint64_t fatal_off;
    char fatal_msg[400];
    uint8_t *cbuf; size_t cbuf_cap;
    ZSTD_DCtx *zctx;
    size_t block_pages;
    struct Prefetch *pf;     /* chunk prefetcher for compressed data, or NULL */
    const uint8_t *map;      /* whole file mapped read-only (uncompressed data), or NULL */
    uint64_t map_len;
    long host_page;
} Decoder;

static void warn(Decoder *d, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&warn_mu);
    if (d->nwarn < MAX_WARN) {
        va_start(ap, fmt);
        vsnprintf(d->msgs[d->nwarn], sizeof d->msgs[0], fmt, ap);
        va_end(ap);
    }
    d->nwarn++;
    pthread_mutex_unlock(&warn_mu);
}

/* Refuse the file (the first reason is kept): every stream stops at its next block. */
static void fatal(Decoder *d, uint64_t off, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&warn_mu);
    if (!d->fatal) {
        va_start(ap, fmt);
        vsnprintf(d->fatal_msg, sizeof d->fatal_msg, fmt, ap);
        va_end(ap);
        d->fatal_off = off;
        __atomic_store_n(&d->fatal, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&warn_mu);
}

static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int read_full(int fd, void *dst, size_t n, uint64_t off, size_t *got)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)dst + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *got = done;
            return -1;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

static int ensure_cap(uint8_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* Limits on compressed data (docs/faults.md, "Hostile input"): real chunks of ring-buffer
 * pages and metadata sections compress 2-20x; a chunk may declare at most 64x its compressed
 * size plus 16 pages, 256 MiB in any case, and all chunks of a file together at most 32x the
 * file's size plus 16 MiB. Everything decompressed, and so every record decoded, is then
 * bounded by the size of the input. */
#define CHUNK_MAX_RATIO 64
#define CHUNK_FREE_PAGES 16
#define CHUNK_MAX_SIZE (256u << 20)
#define FILE_MAX_RATIO 32
#define FILE_FREE_BYTES (16ull << 20)

/* Take n from a budget shared with the prefetch thread; 0 if it does not hold n. */
static int take_budget(uint64_t *budget, uint64_t n)
{
    uint64_t have = __atomic_load_n(budget, __ATOMIC_RELAXED);
    do {
        if (have < n)
            return 0;
    } while (!__atomic_compare_exchange_n(budget, &have, have - n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 1;
}

/* Read and decompress the next chunk of a compressed stream into *dst.
 * Layout: <u32 chunk count> then chunks of <u32 csize><u32 usize><data>.
 * Returns 1 with a chunk, 0 at the end or on damage (with a warning). */
static int fetch_chunk(Decoder *d, Cursor *c, uint8_t **cbuf, size_t *cbuf_cap, ZSTD_DCtx *zctx,
                       uint8_t **dst, size_t *dst_cap, size_t *out_len, uint64_t *out_off)
{
    size_t got;
    uint8_t hdr[8];
    if (!c->chunk_header_read) {
        c->chunk_header_read = 1;
        if (c->end - c->off < 4 || read_full(c->fd, hdr, 4, c->off, &got) < 0 || got < 4) {
            if (c->end > c->off)
                warn(d, "cpu %d: truncated chunk count at offset %llu", c->cpu, (unsigned long long)c->off);
            return 0;
        }
        c->chunks_left = rd32(hdr);
        c->off += 4;
    }
    if (!c->chunks_left)
        return 0;
    if (c->end - c->off < 8 || read_full(c->fd, hdr, 8, c->off, &got) < 0 || got < 8) {
        warn(d, "cpu %d: truncated compressed chunk header at offset %llu", c->cpu, (unsigned long long)c->off);
        return 0;
    }
    uint32_t csize = rd32(hdr), usize = rd32(hdr + 4);
    uint64_t chunk_off = c->off;
    if (csize > c->end - c->off - 8) {
        warn(d, "cpu %d: compressed chunk at offset %llu claims %u bytes, only %llu left in the section",
             c->cpu, (unsigned long long)chunk_off, csize, (unsigned long long)(c->end - c->off - 8));
        return 0;
    }
    /* A chunk holds a few pages (trace-cmd writes 10) that compress 2-20x: refuse what only
     * a decompression bomb declares, before allocating for it. */
    uint64_t allowed = (uint64_t)csize * CHUNK_MAX_RATIO + (uint64_t)CHUNK_FREE_PAGES * d->page_size;
    if (usize > CHUNK_MAX_SIZE || usize > allowed) {
        fatal(d, chunk_off, "cpu %d data: compressed chunk declares %u bytes from %u: expected at most %s "
              "(a decompression bomb)", c->cpu, usize, csize,
              usize > CHUNK_MAX_SIZE ? "256 MiB" : "64 times its compressed size plus 16 pages");
        return 0;
    }
    if (!take_budget(&d->inflate_budget, usize)) {
        fatal(d, chunk_off, "cpu %d data: the file's compressed chunks declare more than %d times the file's size "
              "plus 16 MiB (a decompression bomb)", c->cpu, FILE_MAX_RATIO);
        return 0;
    }
    if (ensure_cap(cbuf, cbuf_cap, csize ? csize : 1) < 0 ||
        ensure_cap(dst, dst_cap, usize ? usize : 1) < 0) {
        warn(d, "cpu %d: out of memory for chunk at offset %llu", c->cpu, (unsigned long long)chunk_off);
        return 0;
    }
    if (read_full(c->fd, *cbuf, csize, c->off + 8, &got) < 0 || got < csize) {
        warn(d, "cpu %d: file truncated inside compressed chunk at offset %llu", c->cpu,
             (unsigned long long)chunk_off);
        return 0;
    }
    size_t out = 0;
    if (c->comp == COMP_ZSTD) {
        size_t r = ZSTD_decompressDCtx(zctx, *dst, usize, *cbuf, csize);
        if (ZSTD_isError(r)) {
            warn(d, "cpu %d: zstd chunk at offset %llu does not decompress: %s", c->cpu,
                 (unsigned long long)chunk_off, ZSTD_getErrorName(r));
            return 0;
        }
        out = r;
    } else {
        uLongf dl = usize;
        int r = uncompress(*dst, &dl, *cbuf, csize);
        if (r != Z_OK) {
            warn(d, "cpu %d: zlib chunk at offset %llu does not decompress (error %d)", c->cpu,
                 (unsigned long long)chunk_off, r);
            return 0;
        }
        out = dl;
    }
    if (out != usize)
        warn(d, "cpu %d: chunk at offset %llu decompressed to %zu bytes, header says %u", c->cpu,
             (unsigned long long)chunk_off, out, usize);
    c->off += 8 + (uint64_t)csize;
    c->chunks_left--;
    *out_len = out;
    *out_off = chunk_off;
    return 1;
}

/* Load the next block of pages into c->buf. Returns 1 if loaded, 0 at end. */
static int load_block(Decoder *d, Cursor *c)
{
    if (c->damaged || __atomic_load_n(&d->fatal, __ATOMIC_RELAXED))
        return 0;
    if (c->comp == COMP_NONE) {
        /* Give back the pages of the block just decoded: keeps the file out of our RSS. */
        if (!UNDER_ASAN && c->buf && c->buf_len) {
            uintptr_t lo = ((uintptr_t)c->buf + d->host_page - 1) & ~(uintptr_t)(d->host_page - 1);
            uintptr_t hi = ((uintptr_t)c->buf + c->buf_len) & ~(uintptr_t)(d->host_page - 1);
            if (hi > lo)
                madvise((void *)lo, hi - lo, MADV_DONTNEED);
        }
        c->buf = NULL;
        c->buf_len = 0;
        if (c->off >= c->end)
            return 0;
        uint64_t want = (uint64_t)d->page_size * d->block_pages;
        if (want > c->end - c->off)
            want = c->end - c->off;
        c->buf = d->map + c->off;
        c->buf_len = want;
        c->buf_file_off = c->off;
        c->off += want;
        return 1;
    }

    if (!d->pf) {
        size_t len;
        uint64_t off;
        if (!fetch_chunk(d, c, &d->cbuf, &d->cbuf_cap, d->zctx, &c->own, &c->own_cap, &len, &off))
            return 0;
        c->buf = c->own;
        c->buf_len = len;
        c->buf_file_off = off;
        return 1;
    }
    /* A helper thread decompresses each stream's next chunk ahead of us. */
    Prefetch *pf = d->pf;
    pthread_mutex_lock(&pf->mu);
    while (!c->pf_ready)
        pthread_cond_wait(&pf->cv, &pf->mu);
    int ok = c->pf_status;
    if (ok) {
        uint8_t *t = c->own;
        size_t tc = c->own_cap;
        c->own = c->pf_buf;
        c->own_cap = c->pf_cap;
        c->pf_buf = t;
        c->pf_cap = tc;
        c->buf = c->own;
        c->buf_len = c->pf_len;
        c->buf_file_off = c->pf_off;
        c->pf_ready = 0;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return ok;
}

/* Describe where the current page is, for messages. */
static void page_where(Decoder *d, Cursor *c, char *out, size_t n)
{
    if (c->comp == COMP_NONE)
        snprintf(out, n, "page at file offset %llu", (unsigned long long)(c->buf_file_off + c->page_at));
    else
        snprintf(out, n, "page %zu of compressed chunk at file offset %llu",
                 c->page_at / d->page_size, (unsigned long long)c->buf_file_off);
}

/* Flags the ring buffer ORs into a page's commit field when events were lost
 * before the page (kernel/trace/ring_buffer.c); with RB_MISSED_STORED the count
 * follows the page's data as an unsigned long. */
#define RB_MISSED_EVENTS (1ull << 31)
#define RB_MISSED_STORED (1ull << 30)

static void count_lost(Decoder *d, Cursor *c, const uint8_t *page, uint32_t len, size_t avail)
{
    uint64_t commit = d->commit_size == 8 ? rd64(page + d->commit_off) : rd32(page + d->commit_off);
    int64_t ts = (int64_t)rd64(page);
    if (!c->lost_pages++ || ts < c->lost_first_ts)
        c->lost_first_ts = ts;
    if (ts > c->lost_last_ts)
        c->lost_last_ts = ts;
    if ((commit & RB_MISSED_STORED) && (size_t)d->hdr_size + len + d->commit_size <= avail) {
        const uint8_t *at = page + d->hdr_size + len;
        c->lost_events += d->commit_size == 8 ? rd64(at) : rd32(at);
    } else {
        c->lost_unknown_pages++;
    }
}

/* Move to the next page. Returns 0 when the stream is exhausted. */
static int next_page(Decoder *d, Cursor *c, int first)
{
    for (;;) {
        if (!first)
            c->page_at += d->page_size;
        first = 0;
        if (!c->buf || c->page_at >= c->buf_len) {
            if (!load_block(d, c))
                return 0;
            c->page_at = 0;
        }
        size_t avail = c->buf_len - c->page_at;
        if (avail > d->page_size)
            avail = d->page_size;
        const uint8_t *page = c->buf + c->page_at;
        if (avail < d->hdr_size) {
            char where[160];
            page_where(d, c, where, sizeof where);
            warn(d, "cpu %d: %s: only %zu bytes, shorter than the page header", c->cpu, where, avail);
            return 0;
        }
        uint64_t commit = d->commit_size == 8 ? rd64(page + d->commit_off) : rd32(page + d->commit_off);
        uint32_t len = (uint32_t)(commit & ((1u << 27) - 1));
        if (len > avail - d->hdr_size) {
            char where[160];
            page_where(d, c, where, sizeof where);
            warn(d, "cpu %d: %s: data size %u exceeds the %zu bytes available (corrupted page); "
                    "decoding what fits", c->cpu, where, len, avail - d->hdr_size);
            len = (uint32_t)(avail - d->hdr_size);
            /* A damaged page ends the stream after what fits in it (the prefetch thread
             * owns the stream's chunk position: only this cursor's flag changes). */
            c->damaged = 1;
            c->buf_len = c->page_at + avail;
        }
        c->ts = rd64(page);
        if (commit & RB_MISSED_EVENTS)
            count_lost(d, c, page, len, avail);
        c->data = page + d->hdr_size;
        c->data_len = len;
        c->pos = 0;
        if (len)
            return 1;
    }
}

/* Peek the next data record of the stream into c->rec. */
static void advance(Decoder *d, Cursor *c)
{
    c->has = 0;
    if (c->done)
        return;
    for (;;) {
        const uint8_t *data = c->data;
        uint32_t n = c->data_len;
        while (c->pos < n) {
            uint32_t pos = c->pos;
            if (n - pos < 4)
                goto bad_page;
            uint32_t hdr = rd32(data + pos);
            uint32_t type_len = hdr & 31, delta = hdr >> 5;
            uint32_t p = pos + 4;
            uint32_t len;
            switch (type_len) {
            case 29: /* padding */
                if (n - p < 4) { /* null padding filling the page */
                    c->pos = n;
                    continue;
                }
                len = rd32(data + p);
                c->ts += delta;
                if (len > n - p) {
                    c->pos = n;
                    continue;
                }
                c->pos = p + len;
                continue;
            case 30: /* time extend */
                if (n - p < 4)
                    goto bad_page;
                c->ts += ((uint64_t)rd32(data + p) << 27) + delta;
                c->pos = p + 4;
                continue;
            case 31: /* absolute time stamp */
                if (n - p < 4)
                    goto bad_page;
                c->ts = ((uint64_t)rd32(data + p) << 27) + delta;
                c->pos = p + 4;
                continue;
            case 0:
                if (n - p < 4)
                    goto bad_page;
                len = rd32(data + p);
                if (len < 4)
                    goto bad_page;
                len = ((len - 4) + 3) & ~3u;
                p += 4;
                break;
            default:
                len = type_len * 4;
                break;
            }
            if (len > n - p)
                goto bad_page;
            c->ts += delta;
            c->rec = data + p;
            c->rec_len = len;
            c->rec_ts = c->ts;
            c->pos = p + len;
            c->has = 1;
            return;
        }
        if (!next_page(d, c, 0)) {
            c->done = 1;
            return;
        }
        continue;
    bad_page: {
            char where[160];
            page_where(d, c, where, sizeof where);
            warn(d, "cpu %d: %s: malformed event header at data offset %u; rest of the page skipped",
                 c->cpu, where, c->pos);
            c->pos = c->data_len;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Appending one record to a slot.                                      */

static inline uint64_t rdn(const uint8_t *p, uint32_t size)
{
    switch (size) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: return rd32(p);
    default: return rd64(p);
    }
}

/* Arrow strings must be UTF-8: replace bytes of invalid sequences with '?'. */
static void sanitize_utf8(uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
        int ok = need > 0 && i + need < n;
        if (ok && need == 1 && c < 0xC2) ok = 0;
        for (size_t k = 1; ok && k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                ok = 0;
        if (ok && need == 2) {
            uint32_t cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) ok = 0;
        }
        if (ok && need == 3) {
            uint32_t cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            if (cp < 0x10000 || cp > 0x10FFFF) ok = 0;
        }
        if (ok) { i += need + 1; continue; }
        s[i++] = '?';
    }
}

static inline int put_str(Vec *dv, Vec *ov, int32_t *count, const uint8_t *s, size_t n)
{
    if ((uint64_t)*count + n > INT32_MAX)
        return -1;
    if (vec_reserve(dv, n + 1) < 0 || vec_reserve(ov, 4) < 0)
        return -2;
    uint8_t *dst = (uint8_t *)dv->p + dv->len;
    memcpy(dst, s, n);
    for (size_t i = 0; i < n; i++)
        if (dst[i] >= 0x80) {
            sanitize_utf8(dst, n);
            break;
        }
    dv->len += n;
    *count += (int32_t)n;
    VEC_PUT(ov, count, 4);
    return 0;
}

/* A NUL-terminated string of at most max bytes (char[N] fields): copied and
 * scanned in one pass, 8 bytes at a time. */
static inline int put_cstr(Vec *dv, Vec *ov, int32_t *count, const uint8_t *s, uint32_t max)
{
    if ((uint64_t)*count + max > INT32_MAX)
        return -1;
    if (vec_reserve(dv, (size_t)max + 8) < 0 || vec_reserve(ov, 4) < 0)
        return -2;
    uint8_t *dst = (uint8_t *)dv->p + dv->len;
    uint32_t n = 0;
    uint64_t high = 0;
    while (n + 8 <= max) {
        uint64_t w;
        memcpy(&w, s + n, 8);
        memcpy(dst + n, &w, 8);
        uint64_t zero = (w - 0x0101010101010101ULL) & ~w & 0x8080808080808080ULL;
        if (zero) {
            uint32_t k = (uint32_t)(__builtin_ctzll(zero) >> 3);
            high |= w & ((k ? (~0ULL >> (64 - 8 * k)) : 0) & 0x8080808080808080ULL);
            n += k;
            goto done;
        }
        high |= w & 0x8080808080808080ULL;
        n += 8;
    }
    while (n < max && s[n]) {
        dst[n] = s[n];
        high |= s[n] & 0x80;
        n++;
    }
done:
    if (high)
        sanitize_utf8(dst, n);
    dv->len += n;
    *count += (int32_t)n;
    VEC_PUT(ov, count, 4);
    return 0;
}

/* A string known to be valid UTF-8 (task comms, prepared in Python). */
static inline int put_trusted(Vec *dv, Vec *ov, int32_t *count, const char *s, size_t n)
{
    if ((uint64_t)*count + n > INT32_MAX)
        return -1;
    if (vec_reserve(dv, n + 16) < 0 || vec_reserve(ov, 4) < 0)
        return -2;
    char *dst = dv->p + dv->len;
    if (n <= 16)
        memcpy(dst, s, 16); /* the comm table ends with 16 bytes of slack */
    else
        memcpy(dst, s, n);
    dv->len += n;
    *count += (int32_t)n;
    VEC_PUT(ov, count, 4);
    return 0;
}

static inline int put_list(Column *col, const uint8_t *s, size_t nbytes)
{
    size_t nelem = nbytes / col->elem;
    nbytes = nelem * col->elem;
    if ((uint64_t)col->count + nelem > INT32_MAX)
        return -1;
    if (vec_reserve(&col->a, nbytes) < 0 || vec_reserve(&col->o, 4) < 0)
        return -2;
    if (nbytes) /* an empty list: col->a may still have no memory at all */
        VEC_PUT(&col->a, s, nbytes);
    col->count += (int32_t)nelem;
    VEC_PUT(&col->o, &col->count, 4);
    return 0;
}

typedef struct {
    const int32_t *comm_index; /* pid -> index in comm_offsets, -1 unknown */
    size_t npids;
    const int32_t *comm_offsets; /* n+1 offsets into comm_data */
    const char *comm_data;
} Comms;

/* Resolve a dynamic (data_loc / rel_loc) field into [start, len) within the record. */
static inline int dyn_range(const Column *col, const uint8_t *rec, uint32_t rec_len,
                            uint32_t *start, uint32_t *len)
{
    if (col->offset + 4 > rec_len)
        return -1;
    uint32_t v = rd32(rec + col->offset);
    uint32_t off = v & 0xffff, l = v >> 16;
    if (col->flags & FLAG_REL_LOC)
        off += col->offset + col->size;
    if (off > rec_len || l > rec_len - off)
        return -1;
    *start = off;
    *len = l;
    return 0;
}

/* [start, start + len) of a variable-length column (dynamic, or the rest of the record), within
 * what the record's other variable-length columns left of its length; start is 0 when empty. */
static inline void var_range(const Column *col, const uint8_t *rec, uint32_t rec_len, uint32_t *var_left,
                             uint32_t *start, uint32_t *len)
{
    if (col->kind == K_STR_DYN || col->kind == K_LIST_DYN) {
        if (dyn_range(col, rec, rec_len, start, len) < 0)
            *start = *len = 0;
    } else {
        *start = col->offset;
        *len = *start < rec_len ? rec_len - *start : 0;
    }
    if (*len > *var_left)
        *len = *var_left;
    *var_left -= *len;
    if (!*len)
        *start = 0;
}

static int offsets_init(Vec *o);

/* 16 bytes each: put_trusted copies 16 bytes at a time */
static const char COMM_IDLE[16] = "<idle>";
static const char COMM_UNKNOWN[16] = "<...>";

static int append(Decoder *d, Slot *s, Comms *cm, int cpu, uint64_t ts, const uint8_t *rec, uint32_t rec_len)
{
    int32_t pid = 0;
    /* A record shorter than its format's fixed fields is damaged; skipping it also bounds
     * what one record adds to the columns by its own length. */
    if (rec_len < s->min_len) {
        s->short_records++;
        return 0;
    }
    /* Variable-length data (dynamic strings and arrays, the rest of the record) of one record
     * shares its length: real fields never overlap, damaged ones may not multiply it. */
    uint32_t var_left = rec_len;
    if (!s->rows) { /* offsets buffers start with 0; created lazily so unused events cost nothing */
        if (!s->comm_o.len && offsets_init(&s->comm_o) < 0)
            return -2;
        for (int i = 0; i < s->ncols; i++)
            if (s->cols[i].kind != K_INT && !s->cols[i].o.len && offsets_init(&s->cols[i].o) < 0)
                return -2;
    }
    pid = (int32_t)rdn(rec + s->pid_offset, s->pid_size); /* within min_len */
    if (vec_reserve(&s->ts, 8) < 0 || vec_reserve(&s->cpu, 4) < 0 || vec_reserve(&s->pid, 4) < 0)
        return -2;
    int64_t tsv = (int64_t)ts;
    int32_t cpuv = cpu;
    VEC_PUT(&s->ts, &tsv, 8);
    VEC_PUT(&s->cpu, &cpuv, 4);
    VEC_PUT(&s->pid, &pid, 4);

    const char *comm;
    size_t clen;
    if (pid == 0) {
        comm = COMM_IDLE;
        clen = 6;
    } else if (pid > 0 && (size_t)pid < cm->npids && cm->comm_index[pid] >= 0) {
        int32_t k = cm->comm_index[pid];
        comm = cm->comm_data + cm->comm_offsets[k];
        clen = (size_t)(cm->comm_offsets[k + 1] - cm->comm_offsets[k]);
    } else {
        comm = COMM_UNKNOWN;
        clen = 5;
    }
    int r = put_trusted(&s->comm_d, &s->comm_o, &s->comm_count, comm, clen);
    if (r < 0)
        return r;

    for (int i = 0; i < s->ncols; i++) {
        Column *col = &s->cols[i];
        uint32_t start, len;
        switch (col->kind) {
        case K_INT: { /* within min_len */
            if (vec_reserve(&col->a, 8) < 0)
                return -2;
            char *dst = col->a.p + col->a.len;
            const uint8_t *src = rec + col->offset;
            switch (col->size) { /* constant sizes: plain moves, no memcpy call */
            case 1: *dst = (char)*src; break;
            case 2: memcpy(dst, src, 2); break;
            case 4: memcpy(dst, src, 4); break;
            default: memcpy(dst, src, 8); break;
            }
            col->a.len += col->size;
            break;
        }
        case K_STR_FIXED: /* within min_len */
            r = put_cstr(&col->a, &col->o, &col->count, rec + col->offset, col->size);
            if (r < 0)
                return r;
            break;
        case K_STR_DYN:
        case K_STR_REST:
            var_range(col, rec, rec_len, &var_left, &start, &len);
            if (len) {
                const uint8_t *z = memchr(rec + start, 0, len);
                if (z)
                    len = (uint32_t)(z - (rec + start));
            }
            if ((col->flags & FLAG_STRIP_NL) && len && rec[start + len - 1] == '\n')
                len--;
            r = put_str(&col->a, &col->o, &col->count, rec + start, len);
            if (r < 0)
                return r;
            break;
        case K_LIST_FIXED: /* within min_len */
            r = put_list(col, rec + col->offset, col->size);
            if (r < 0)
                return r;
            break;
        case K_LIST_DYN:
        case K_LIST_REST:
            var_range(col, rec, rec_len, &var_left, &start, &len);
            r = put_list(col, rec + start, len);
            if (r < 0)
                return r;
            break;
        }
    }
    s->rows++;
    return 0;
}

/* ------------------------------------------------------------------ */
/* decode()                                                             */

static void slot_free(Slot *s)
{
    vec_free(&s->ts); vec_free(&s->cpu); vec_free(&s->pid);
    vec_free(&s->comm_o); vec_free(&s->comm_d);
    for (int i = 0; i < s->ncols; i++) {
        vec_free(&s->cols[i].a);
        vec_free(&s->cols[i].o);
    }
    free(s->cols);
}

static int offsets_init(Vec *o)
{
    int32_t z = 0;
    if (vec_reserve(o, 4) < 0)
        return -1;
    VEC_PUT(o, &z, 4);
    return 0;
}

static PyObject *slot_result(Slot *s)
{
    if (!s->rows)
        return Py_BuildValue("{s:i,s:L}", "rows", 0, "short_records", (long long)s->short_records);
    PyObject *cols = PyList_New(s->ncols);
    if (!cols)
        return NULL;
    for (int i = 0; i < s->ncols; i++) {
        Column *col = &s->cols[i];
        PyObject *item;
        if (col->kind == K_INT)
            item = Py_BuildValue("(N)", vec_to_buffer(&col->a));
        else
            item = Py_BuildValue("(NN)", vec_to_buffer(&col->o), vec_to_buffer(&col->a));
        if (!item) {
            Py_DECREF(cols);
            return NULL;
        }
        PyList_SET_ITEM(cols, i, item);
    }
    return Py_BuildValue("{s:L,s:L,s:N,s:N,s:N,s:N,s:N,s:N}",
                         "rows", (long long)s->rows, "short_records", (long long)s->short_records,
                         "ts", vec_to_buffer(&s->ts),
                         "cpu", vec_to_buffer(&s->cpu),
                         "pid", vec_to_buffer(&s->pid),
                         "comm_offsets", vec_to_buffer(&s->comm_o),
                         "comm_data", vec_to_buffer(&s->comm_d),
                         "columns", cols);
}

/* Keep every compressed stream one chunk ahead of the decoder. */
static void *prefetch_main(void *arg)
{
    Prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        Cursor *target = NULL;
        int live = 0;
        for (Py_ssize_t i = 0; i < pf->nstreams; i++) {
            Cursor *c = &pf->cur[i];
            if (c->pf_end)
                continue;
            live = 1;
            if (!c->pf_ready) {
                target = c;
                break;
            }
        }
        if (pf->stop || !live)
            break;
        if (!target) {
            pthread_cond_wait(&pf->cv, &pf->mu);
            continue;
        }
        pthread_mutex_unlock(&pf->mu);
        size_t len = 0;
        uint64_t off = 0;
        int ok = fetch_chunk(pf->d, target, &pf->cbuf, &pf->cbuf_cap, pf->zctx, &target->pf_buf,
                             &target->pf_cap, &len, &off);
        pthread_mutex_lock(&pf->mu);
        target->pf_len = len;
        target->pf_off = off;
        target->pf_status = ok;
        target->pf_end = !ok;
        target->pf_ready = 1;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

typedef struct {
    Decoder *d;
    Cursor *cur;
    Py_ssize_t nstreams;
    Slot **by_id;
    uint64_t *id_counts;
    int64_t *per_stream;
    Comms *cm;
    uint32_t type_off, type_size;
    int64_t first_ts, last_ts, total;
    int err;
} Job;

/* Merge the streams in timestamp order (ties: lowest stream first, as
 * trace-cmd does) and append each record whose event has a slot. */
static void *run_job(void *arg)
{
    Job *j = arg;
    Decoder *d = j->d;
    Cursor *cur = j->cur;
    for (Py_ssize_t i = 0; i < j->nstreams; i++) {
        if (next_page(d, &cur[i], 1))
            advance(d, &cur[i]);
        else
            cur[i].done = 1;
    }
    for (;;) {
        Cursor *best = NULL;
        Py_ssize_t bi = 0;
        for (Py_ssize_t i = 0; i < j->nstreams; i++) {
            Cursor *c = &cur[i];
            if (c->has && (!best || c->rec_ts < best->rec_ts)) {
                best = c;
                bi = i;
            }
        }
        if (!best)
            break;
        const uint8_t *rec = best->rec;
        uint32_t rec_len = best->rec_len;
        if (j->type_off + j->type_size <= rec_len) {
            uint32_t id = (uint32_t)rdn(rec + j->type_off, j->type_size) & 0xffff;
            j->id_counts[id]++;
            Slot *s = j->by_id[id];
            if (s && !s->overflow) {
                int r = append(d, s, j->cm, best->cpu, best->rec_ts, rec, rec_len);
                if (r == -2) {
                    j->err = 1;
                    break;
                }
                if (r == -1)
                    s->overflow = 1;
            }
        }
        if (j->first_ts < 0)
            j->first_ts = (int64_t)best->rec_ts;
        j->last_ts = (int64_t)best->rec_ts;
        j->total++;
        j->per_stream[bi]++;
        advance(d, best);
    }
    return NULL;
}

PyDoc_STRVAR(decode_doc,
"decode(path, fd, streams, compression, page_size, commit_offset, commit_size, data_offset,\n"
"       type_offset, type_size, slots, comm_index, comm_offsets, comm_data) -> dict\n\n"
"Decode every record of the given CPU streams, merged in timestamp order.\n"
"streams: list of (cpu, file_offset, size). slots: list of\n"
"(event_id, pid_offset, pid_size, [(kind, flags, offset, size, elem), ...][, thread]).\n"
"Slots given thread k > 0 are decoded by a helper thread (uncompressed data only).\n"
"Returns {'counts': {id: n}, 'slots': [dict per slot], 'warnings': [str], 'fatal': (offset, str) | None,\n"
"'first_ts': int|None, 'last_ts': int|None, 'cpu_counts': {cpu: n},\n"
"'lost': [(cpu, pages, events, unknown_pages, first_ts, last_ts)]} where 'lost' lists the\n"
"streams with pages flagged as following lost events (events: the counts the kernel stored;\n"
"unknown_pages: flagged pages without a stored count).");

/* "O&" converter: an int in [0, 2^64), as it is (the "K" format would wrap larger ones). Every
 * offset, size and count is then checked in 64 bits before it is narrowed. */
static int u64_arg(PyObject *o, void *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "an offset, size, count or id is negative or does not fit in 64 bits");
        return 0;
    }
    *(uint64_t *)out = v;
    return 1;
}

static PyObject *py_decode(PyObject *self, PyObject *args)
{
    const char *path;
    int fd, comp;
    PyObject *streams_o, *slots_o;
    uint64_t page_size, commit_off, commit_size, data_off, type_off, type_size;
    Py_buffer comm_index, comm_offsets, comm_data;
    if (!PyArg_ParseTuple(args, "siOiO&O&O&O&O&O&Oy*y*y*", &path, &fd, &streams_o, &comp, u64_arg, &page_size,
                          u64_arg, &commit_off, u64_arg, &commit_size, u64_arg, &data_off, u64_arg, &type_off,
                          u64_arg, &type_size, &slots_o, &comm_index, &comm_offsets, &comm_data))
        return NULL;

    PyObject *result = NULL, *counts = NULL, *slot_list = NULL, *cpu_counts = NULL, *lost = NULL;
    Cursor *cur = NULL;
    Slot *slots = NULL;
    Slot **by_id = NULL;
    uint64_t *id_counts = NULL;
    Py_ssize_t nstreams = 0, nslots = 0;
    int64_t *per_stream = NULL;
    PyObject *warnings = NULL;
    Decoder *dp = calloc(1, sizeof(Decoder));
    if (!dp) {
        PyBuffer_Release(&comm_index);
        PyBuffer_Release(&comm_offsets);
        PyBuffer_Release(&comm_data);
        return PyErr_NoMemory();
    }
    dp->path = path;
    dp->block_pages = 256;
    warnings = PyList_New(0);
    if (!warnings)
        goto out;
    /* 64-bit comparisons that cannot wrap: the page header must hold the commit field, a page
     * its header, and a record the type field */
    if (page_size < 16 || page_size > (1u << 24) || data_off >= page_size ||
        (commit_size != 4 && commit_size != 8) || commit_off > data_off || commit_size > data_off - commit_off ||
        (type_size != 1 && type_size != 2 && type_size != 4) || type_off > page_size ||
        (comp != COMP_NONE && comp != COMP_ZLIB && comp != COMP_ZSTD)) {
        PyErr_Format(PyExc_ValueError, "unsupported page layout (page size %llu, header %llu, commit %llu@%llu, "
                     "type %llu@%llu)", (unsigned long long)page_size, (unsigned long long)data_off,
                     (unsigned long long)commit_size, (unsigned long long)commit_off,
                     (unsigned long long)type_size, (unsigned long long)type_off);
        goto out;
    }
    dp->page_size = (uint32_t)page_size;
    dp->commit_off = (uint32_t)commit_off;
    dp->commit_size = (uint32_t)commit_size;
    dp->hdr_size = (uint32_t)data_off;
    if (comm_index.len % 4 || comm_offsets.len % 4 || comm_offsets.len < 4) {
        PyErr_SetString(PyExc_ValueError, "comm tables must be int32 arrays");
        goto out;
    }
    {
        const int32_t *co = comm_offsets.buf;
        Py_ssize_t ncomm = comm_offsets.len / 4 - 1;
        int bad = co[0] != 0 || (Py_ssize_t)co[ncomm] + 16 > comm_data.len;
        for (Py_ssize_t k = 0; !bad && k < ncomm; k++)
            bad = co[k + 1] < co[k];
        for (Py_ssize_t k = 0; !bad && k < comm_index.len / 4; k++) {
            int32_t v = ((const int32_t *)comm_index.buf)[k];
            bad = v < -1 || v >= ncomm;
        }
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "inconsistent comm tables (need 16 bytes of slack)");
            goto out;
        }
    }
    Comms cm = {comm_index.buf, (size_t)comm_index.len / 4, comm_offsets.buf, comm_data.buf};

    nstreams = PySequence_Size(streams_o);
    nslots = PySequence_Size(slots_o);
    if (nstreams < 0 || nslots < 0)
        goto out;
    cur = calloc(nstreams ? nstreams : 1, sizeof *cur);
    per_stream = calloc(nstreams ? nstreams : 1, sizeof *per_stream);
    slots = calloc(nslots ? nslots : 1, sizeof *slots);
    by_id = calloc(65536, sizeof *by_id);
    id_counts = calloc(65536, sizeof *id_counts);
    if (!cur || !slots || !by_id || !id_counts || !per_stream) {
        PyErr_NoMemory();
        goto out;
    }
    if (comp == COMP_ZSTD && !(dp->zctx = ZSTD_createDCtx())) {
        PyErr_NoMemory();
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        goto out;
    }
    dp->map_len = (uint64_t)st.st_size;
    dp->host_page = sysconf(_SC_PAGESIZE);
    dp->inflate_budget = dp->map_len * FILE_MAX_RATIO + FILE_FREE_BYTES;
    if (comp == COMP_NONE && dp->map_len) {
        dp->map = map_file(fd, dp->map_len);
        if (!dp->map) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
            goto out;
        }
    }
    for (Py_ssize_t i = 0; i < nstreams; i++) {
        PyObject *t = PySequence_GetItem(streams_o, i);
        uint64_t off, size, cpu;
        if (!t || !PyArg_ParseTuple(t, "O&O&O&", u64_arg, &cpu, u64_arg, &off, u64_arg, &size)) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
        if (cpu > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "cpu number %llu out of range", (unsigned long long)cpu);
            goto out;
        }
        cur[i].cpu = (int)cpu;
        cur[i].fd = fd;
        cur[i].comp = comp;
        cur[i].off = off;
        cur[i].end = off + size;
        if (off > dp->map_len || size > dp->map_len - off) {
            uint64_t have = off > dp->map_len ? 0 : dp->map_len - off;
            warn(dp, "cpu %d: file truncated: %llu bytes of trace data expected at offset %llu, "
                     "the file has %llu", (int)cpu, (unsigned long long)size, (unsigned long long)off,
                 (unsigned long long)have);
            cur[i].end = off + have;
            if (comp == COMP_NONE) /* decode whole pages only */
                cur[i].end = off + have - have % page_size;
        }
    }
    for (Py_ssize_t i = 0; i < nslots; i++) {
        PyObject *t = PySequence_GetItem(slots_o, i), *fields;
        Slot *s = &slots[i];
        uint64_t id, pid_offset, pid_size;
        if (!t || !PyArg_ParseTuple(t, "O&O&O&O|i", u64_arg, &id, u64_arg, &pid_offset, u64_arg, &pid_size, &fields,
                                    &s->thread)) {
            Py_XDECREF(t);
            goto out;
        }
        if (id > 65535 || (pid_size != 1 && pid_size != 2 && pid_size != 4) || pid_offset > page_size ||
            s->thread < 0 || s->thread > 15) {
            Py_DECREF(t);
            PyErr_Format(PyExc_ValueError, "bad slot for event id %llu", (unsigned long long)id);
            goto out;
        }
        s->id = (int)id;
        s->pid_offset = (uint32_t)pid_offset;
        s->pid_size = (uint32_t)pid_size;
        s->min_len = s->pid_offset + s->pid_size;
        by_id[s->id] = s;
        Py_ssize_t nf = PySequence_Size(fields);
        s->cols = calloc(nf ? nf : 1, sizeof *s->cols);
        if (nf < 0 || !s->cols) {
            Py_DECREF(t);
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            goto out;
        }
        s->ncols = (int)nf;
        for (Py_ssize_t k = 0; k < nf; k++) {
            Column *col = &s->cols[k];
            PyObject *f = PySequence_GetItem(fields, k);
            uint64_t offset, size, elem;
            if (!f || !PyArg_ParseTuple(f, "iiO&O&O&", &col->kind, &col->flags, u64_arg, &offset, u64_arg, &size,
                                        u64_arg, &elem)) {
                Py_XDECREF(f);
                Py_DECREF(t);
                goto out;
            }
            Py_DECREF(f);
            /* a field must fit in a page for a record to hold it; then no sum below wraps */
            int bad = col->kind < K_INT || col->kind > K_LIST_REST || offset > page_size || size > page_size ||
                      elem > 8;
            col->offset = (uint32_t)offset;
            col->size = (uint32_t)size;
            col->elem = (uint32_t)elem;
            uint32_t end = col->offset + (col->kind == K_STR_DYN || col->kind == K_LIST_DYN ? 4 :
                                          col->kind == K_STR_REST || col->kind == K_LIST_REST ? 0 : col->size);
            if (end > s->min_len)
                s->min_len = end;
            if (col->kind == K_INT && col->size != 1 && col->size != 2 && col->size != 4 && col->size != 8)
                bad = 1;
            if ((col->kind == K_LIST_FIXED || col->kind == K_LIST_DYN || col->kind == K_LIST_REST) &&
                col->elem != 1 && col->elem != 2 && col->elem != 4 && col->elem != 8)
                bad = 1;
            if (bad) {
                Py_DECREF(t);
                PyErr_Format(PyExc_ValueError, "bad column description for event id %d", s->id);
                goto out;
            }
        }
        Py_DECREF(t);
    }

    /* Helper threads (uncompressed data only): each walks every record with
     * its own cursors and file mapping -- walking is cheap -- but appends
     * only the events of the slots assigned to it. */
    int nthreads = 1;
    for (Py_ssize_t i = 0; i < nslots; i++)
        if (slots[i].thread + 1 > nthreads)
            nthreads = slots[i].thread + 1;
    if (comp != COMP_NONE || !dp->map || nthreads > 16)
        nthreads = 1;
    Job jobs[16];
    memset(jobs, 0, sizeof jobs);
    for (int t = 0; t < nthreads; t++) {
        Job *j = &jobs[t];
        j->cm = &cm;
        j->type_off = (uint32_t)type_off;
        j->type_size = (uint32_t)type_size;
        j->nstreams = nstreams;
        j->first_ts = j->last_ts = -1;
        if (t == 0) {
            j->d = dp;
            j->cur = cur;
            j->by_id = by_id;
            j->id_counts = id_counts;
            j->per_stream = per_stream;
            continue;
        }
        j->d = calloc(1, sizeof(Decoder));
        j->cur = calloc(nstreams ? nstreams : 1, sizeof(Cursor));
        j->by_id = calloc(65536, sizeof(Slot *));
        j->id_counts = calloc(65536, sizeof(uint64_t));
        j->per_stream = calloc(nstreams ? nstreams : 1, sizeof(int64_t));
        if (!j->d || !j->cur || !j->by_id || !j->id_counts || !j->per_stream) {
            nthreads = t + 1;
            j->err = 1;
            break;
        }
        *j->d = *dp;
        j->d->nwarn = 0;
        j->d->cbuf = NULL;
        j->d->cbuf_cap = 0;
        j->d->zctx = NULL;
        j->d->map = map_file(fd, dp->map_len);
        if (!j->d->map) {
            nthreads = t + 1;
            j->err = 1;
            break;
        }
        memcpy(j->cur, cur, nstreams * sizeof(Cursor));
    }
    for (Py_ssize_t i = 0; i < nslots; i++) {
        int t = slots[i].thread < nthreads ? slots[i].thread : 0;
        jobs[0].by_id[slots[i].id] = NULL;
        jobs[t].by_id[slots[i].id] = &slots[i];
    }
    int err = 0;
    for (int t = 0; t < nthreads; t++)
        err |= jobs[t].err;
    Prefetch pf;
    pthread_t pf_tid;
    int pf_started = 0;
    memset(&pf, 0, sizeof pf);
    if (!err && comp != COMP_NONE && nstreams > 0 && sysconf(_SC_NPROCESSORS_ONLN) > 1) {
        pf.cur = cur;
        pf.nstreams = nstreams;
        pf.d = dp;
        pf.zctx = comp == COMP_ZSTD ? ZSTD_createDCtx() : NULL;
        if ((comp != COMP_ZSTD || pf.zctx) && pthread_mutex_init(&pf.mu, NULL) == 0) {
            if (pthread_cond_init(&pf.cv, NULL) == 0) {
                dp->pf = &pf;
                if (pthread_create(&pf_tid, NULL, prefetch_main, &pf) == 0) {
                    pf_started = 1;
                } else {
                    dp->pf = NULL;
                    pthread_cond_destroy(&pf.cv);
                    pthread_mutex_destroy(&pf.mu);
                }
            } else {
                pthread_mutex_destroy(&pf.mu);
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_t tids[16];
    int started[16] = {0};
    if (!err) {
        for (int t = 1; t < nthreads; t++)
            started[t] = pthread_create(&tids[t], NULL, run_job, &jobs[t]) == 0;
        for (int t = 1; t < nthreads; t++)
            if (!started[t]) /* no thread: do its share here */
                run_job(&jobs[t]);
        run_job(&jobs[0]);
        for (int t = 1; t < nthreads; t++)
            if (started[t])
                pthread_join(tids[t], NULL);
    }
    if (pf_started) {
        pthread_mutex_lock(&pf.mu);
        pf.stop = 1;
        pthread_cond_broadcast(&pf.cv);
        pthread_mutex_unlock(&pf.mu);
        pthread_join(pf_tid, NULL);
        pthread_cond_destroy(&pf.cv);
        pthread_mutex_destroy(&pf.mu);
        dp->pf = NULL;
    }
    free(pf.cbuf);
    if (pf.zctx)
        ZSTD_freeDCtx(pf.zctx);
    Py_END_ALLOW_THREADS
    for (int t = 0; t < nthreads; t++)
        err |= jobs[t].err;
    int64_t first_ts = jobs[0].first_ts, last_ts = jobs[0].last_ts, total = jobs[0].total;
    for (int t = 1; t < nthreads; t++) {
        if (jobs[t].d) {
            unmap_file(jobs[t].d->map, jobs[t].d->map_len);
            for (Py_ssize_t i = 0; i < nstreams; i++)
                free(jobs[t].cur ? jobs[t].cur[i].own : NULL);
        }
        free(jobs[t].d);
        free(jobs[t].cur);
        free(jobs[t].by_id);
        free(jobs[t].id_counts);
        free(jobs[t].per_stream);
    }
    if (err) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nslots; i++)
        if (slots[i].overflow)
            warn(dp, "event id %d: more than 2 GiB of string or list data in one column; "
                     "rows after that point were dropped (read fewer events at a time)", slots[i].id);
    for (int i = 0; i < dp->nwarn && i < MAX_WARN; i++) {
        PyObject *s = PyUnicode_FromFormat("%s: %s", path, dp->msgs[i]);
        if (!s || PyList_Append(warnings, s) < 0) {
            Py_XDECREF(s);
            goto out;
        }
        Py_DECREF(s);
    }
    if (dp->nwarn > MAX_WARN) {
        PyObject *s = PyUnicode_FromFormat("%s: %d more warnings not shown", path, dp->nwarn - MAX_WARN);
        if (!s || PyList_Append(warnings, s) < 0) {
            Py_XDECREF(s);
            goto out;
        }
        Py_DECREF(s);
    }

    counts = PyDict_New();
    cpu_counts = PyDict_New();
    slot_list = PyList_New(nslots);
    if (!counts || !slot_list || !cpu_counts)
        goto out;
    for (int id = 0; id < 65536; id++) {
        if (!id_counts[id])
            continue;
        PyObject *k = PyLong_FromLong(id), *v = PyLong_FromUnsignedLongLong(id_counts[id]);
        if (!k || !v || PyDict_SetItem(counts, k, v) < 0) {
            Py_XDECREF(k); Py_XDECREF(v);
            goto out;
        }
        Py_DECREF(k); Py_DECREF(v);
    }
    for (Py_ssize_t i = 0; i < nstreams; i++) {
        PyObject *k = PyLong_FromLong(cur[i].cpu);
        PyObject *old = k ? PyDict_GetItem(cpu_counts, k) : NULL;
        long long prev = old ? PyLong_AsLongLong(old) : 0;
        PyObject *v = PyLong_FromLongLong(prev + per_stream[i]);
        if (!k || !v || PyDict_SetItem(cpu_counts, k, v) < 0) {
            Py_XDECREF(k); Py_XDECREF(v);
            goto out;
        }
        Py_DECREF(k); Py_DECREF(v);
    }
    for (Py_ssize_t i = 0; i < nslots; i++) {
        PyObject *r = slot_result(&slots[i]);
        if (!r)
            goto out;
        PyList_SET_ITEM(slot_list, i, r);
    }
    lost = PyList_New(0);
    if (!lost)
        goto out;
    for (Py_ssize_t i = 0; i < nstreams; i++) {
        if (!cur[i].lost_pages)
            continue;
        PyObject *t = Py_BuildValue("(iKKKLL)", cur[i].cpu, (unsigned long long)cur[i].lost_pages,
                                    (unsigned long long)cur[i].lost_events,
                                    (unsigned long long)cur[i].lost_unknown_pages,
                                    (long long)cur[i].lost_first_ts, (long long)cur[i].lost_last_ts);
        if (!t || PyList_Append(lost, t) < 0) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    PyObject *fts = first_ts < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(first_ts);
    PyObject *lts = last_ts < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(last_ts);
    PyObject *fat = dp->fatal ? Py_BuildValue("(Ks)", (unsigned long long)dp->fatal_off, dp->fatal_msg)
                              : Py_NewRef(Py_None);
    result = Py_BuildValue("{s:O,s:O,s:O,s:N,s:N,s:L,s:O,s:O,s:N}", "counts", counts, "slots", slot_list,
                           "warnings", warnings, "first_ts", fts, "last_ts", lts,
                           "total", (long long)total, "cpu_counts", cpu_counts, "lost", lost, "fatal", fat);

out:
    Py_XDECREF(lost);
    Py_XDECREF(counts);
    Py_XDECREF(slot_list);
    Py_XDECREF(cpu_counts);
    Py_XDECREF(warnings);
    if (cur)
        for (Py_ssize_t i = 0; i < nstreams; i++)
        {
            free(cur[i].own);
            free(cur[i].pf_buf);
        }
    free(cur);
    free(per_stream);
    if (slots)
        for (Py_ssize_t i = 0; i < nslots; i++)
            slot_free(&slots[i]);
    free(slots);
    free(by_id);
    free(id_counts);
    free(dp->cbuf);
    unmap_file(dp->map, dp->map_len);
    if (dp->zctx)
        ZSTD_freeDCtx(dp->zctx);
    free(dp);
    PyBuffer_Release(&comm_index);
    PyBuffer_Release(&comm_offsets);
    PyBuffer_Release(&comm_data);
    return result;
}

PyDoc_STRVAR(decompress_doc,
"decompress(compression, data, size) -> bytes\n\n"
"Decompress one metadata section (compression 1 = zlib, 2 = zstd) of known size.");

static PyObject *py_decompress(PyObject *self, PyObject *args)
{
    int comp;
    Py_buffer in;
    uint64_t size;
    if (!PyArg_ParseTuple(args, "iy*O&", &comp, &in, u64_arg, &size))
        return NULL;
    /* the ratio cap of data chunks, with 1 MiB free: a metadata section is text (2-7x) */
    if (size > CHUNK_MAX_SIZE || size > (uint64_t)in.len * CHUNK_MAX_RATIO + (1u << 20)) {
        PyBuffer_Release(&in);
        PyErr_Format(PyExc_ValueError, "declares %llu bytes from %zd: more than %s (a decompression bomb, "
                     "or a damaged header)", (unsigned long long)size, in.len,
                     size > CHUNK_MAX_SIZE ? "256 MiB" : "64 times its compressed size plus 1 MiB");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) {
        PyBuffer_Release(&in);
        return NULL;
    }
    char *dst = PyBytes_AS_STRING(out);
    int ok;
    size_t got = 0;
    const char *why = "";
    if (comp == COMP_ZSTD) {
        size_t r = ZSTD_decompress(dst, size, in.buf, (size_t)in.len);
        ok = !ZSTD_isError(r);
        if (ok) got = r; else why = ZSTD_getErrorName(r);
    } else if (comp == COMP_ZLIB) {
        uLongf dl = (uLongf)size;
        int r = uncompress((Bytef *)dst, &dl, in.buf, (uLong)in.len);
        ok = r == Z_OK;
        got = dl;
        why = "zlib error";
    } else {
        ok = 0;
        why = "unknown compression";
    }
    PyBuffer_Release(&in);
    if (!ok || got != size) {
        Py_DECREF(out);
        PyErr_Format(PyExc_ValueError, "cannot decompress: %s (got %zu of %llu bytes)",
                     ok ? "size mismatch" : why, got, (unsigned long long)size);
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"decompress", py_decompress, METH_VARARGS, decompress_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tracedat",
    "Native trace.dat page decoder; use lisa_ext.trace.tracedat instead.", -1, methods,
};

PyMODINIT_FUNC PyInit__tracedat(void)
{
    if (PyType_Ready(&BufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    /* bumped whenever decode()'s arguments or results change: tracedat.py checks it */
    if (PyModule_AddIntConstant(m, "ABI_VERSION", 3) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(&BufferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
