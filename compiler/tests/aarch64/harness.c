/*
 * harness.c - runs the kernels of an slmcc AOT object over planned memory.
 *
 * The object (`backends/src/cpu/aot.rs`; one per bucket in a package built
 * with `slmcc compile --cpu aarch64`) defines one function per graph node
 * with the kernel ABI
 *
 *     int32_t kernel(uint8_t *const *bufs);   // 0 = ok, else a status
 *
 * where `bufs` holds one pointer per operand of the node, then one per
 * result. This program is generic: it knows nothing of any graph. What to
 * run comes from two places:
 *
 *  - a kernel table, linked in (`slmcc_kernel_table`, generated per object:
 *    each kernel's symbol name and address), standing for the symbol table
 *    a loader would read from the object itself;
 *  - a plan file, given on the command line: the memory regions, what to
 *    load into them, the kernels to call in order with the place of each
 *    buffer, and what to write out afterwards.
 *
 * The plan file is text, tokens separated by white space, one command per
 * line (the lines are for people; only the token order matters):
 *
 *     slmcc-aot-plan 1
 *     region NAME BYTES                    (before any use of NAME)
 *     load   NAME OFFSET BYTES FILE        (FILE's bytes, exactly BYTES)
 *     kernel SYMBOL N  NAME OFFSET BYTES  ... (N buffers, operands first)
 *     store  NAME OFFSET BYTES FILE
 *
 * FILE is relative to the plan file's folder unless absolute. Regions are
 * allocated 64-byte aligned and zeroed; every buffer is checked to lie in
 * its region before anything runs. Then all loads, all kernels in plan
 * order (`constant` nodes are kernels too: they fill their result), all
 * stores. Exit status: 0 ok, 1 a kernel returned a non-zero status (named
 * on stderr), 2 a bad plan, file or table.
 *
 * Link: aarch64-linux-gnu-gcc -static harness.c slmcc_math.c TABLE.c OBJ.o -lm
 * Run:  qemu-aarch64 ./a.out plan.txt     (or ./a.out plan.txt on the board)
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t (*slmcc_kernel_fn)(uint8_t *const *bufs);

struct slmcc_kernel_entry {
    const char *symbol;
    slmcc_kernel_fn fn;
};

/* Provided by the generated table. */
extern const struct slmcc_kernel_entry slmcc_kernel_table[];
extern const size_t slmcc_kernel_table_len;

#define MAX_REGIONS 16
#define NAME_LEN 64

struct region {
    char name[NAME_LEN];
    size_t bytes;
    uint8_t *mem;
};

struct place {
    int region;
    size_t offset, bytes;
};

struct transfer { /* a load or a store */
    struct place at;
    char *file;
};

struct kernel_call {
    const struct slmcc_kernel_entry *entry;
    size_t nbufs;
    struct place *bufs;
};

static struct region regions[MAX_REGIONS];
static int nregions;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "harness: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p)
        die("out of memory", NULL);
    return p;
}

/* The whole file, NUL-terminated. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path, strerror(errno));
    size_t len = 0, cap = 4096;
    char *buf = xrealloc(NULL, cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0)
            buf = xrealloc(buf, cap *= 2);
    }
    if (ferror(f))
        die(path, "read error");
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* Tokens of the plan, in order. */
static char *cursor;

static char *next_token(void) {
    while (*cursor == ' ' || *cursor == '\t' || *cursor == '\n' || *cursor == '\r')
        cursor++;
    if (!*cursor)
        return NULL;
    char *start = cursor;
    while (*cursor && *cursor != ' ' && *cursor != '\t' && *cursor != '\n' && *cursor != '\r')
        cursor++;
    if (*cursor)
        *cursor++ = '\0';
    return start;
}

static char *expect_token(const char *what) {
    char *t = next_token();
    if (!t)
        die("plan ends early, expected", what);
    return t;
}

static size_t expect_size(const char *what) {
    char *t = expect_token(what);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (errno || *end || t[0] == '-' || v > SIZE_MAX)
        die("not a size in the plan", t);
    return (size_t)v;
}

static int find_region(const char *name) {
    for (int i = 0; i < nregions; i++)
        if (strcmp(regions[i].name, name) == 0)
            return i;
    die("unknown region (declare it with `region` first)", name);
    return -1;
}

static struct place expect_place(void) {
    struct place p;
    p.region = find_region(expect_token("a region name"));
    p.offset = expect_size("an offset");
    p.bytes = expect_size("a byte count");
    if (p.offset > regions[p.region].bytes || p.bytes > regions[p.region].bytes - p.offset) {
        char msg[200];
        snprintf(msg, sizeof msg, "%zu bytes at %zu do not fit region %.63s (%zu bytes)", p.bytes,
                 p.offset, regions[p.region].name, regions[p.region].bytes);
        die("bad plan", msg);
    }
    return p;
}

static const struct slmcc_kernel_entry *find_kernel(const char *symbol) {
    for (size_t i = 0; i < slmcc_kernel_table_len; i++)
        if (strcmp(slmcc_kernel_table[i].symbol, symbol) == 0)
            return &slmcc_kernel_table[i];
    die("kernel not in the linked table", symbol);
    return NULL;
}

static char *join(const char *dir, const char *file) {
    if (file[0] == '/' || !dir[0])
        return strdup(file);
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = xrealloc(NULL, n);
    snprintf(p, n, "%s/%s", dir, file);
    return p;
}

static void load(const struct transfer *t) {
    FILE *f = fopen(t->file, "rb");
    if (!f)
        die(t->file, strerror(errno));
    uint8_t *dst = regions[t->at.region].mem + t->at.offset;
    if (fread(dst, 1, t->at.bytes, f) != t->at.bytes || fgetc(f) != EOF)
        die(t->file, "not exactly the planned number of bytes");
    fclose(f);
}

static void store(const struct transfer *t) {
    FILE *f = fopen(t->file, "wb");
    if (!f)
        die(t->file, strerror(errno));
    const uint8_t *src = regions[t->at.region].mem + t->at.offset;
    if (fwrite(src, 1, t->at.bytes, f) != t->at.bytes || fclose(f) != 0)
        die(t->file, "write error");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLAN\n", argv[0]);
        return 2;
    }
    char *dir = strdup(argv[1]);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        dir[0] = '\0';

    cursor = read_text(argv[1]);
    char *magic = next_token();
    char *version = next_token();
    if (!magic || strcmp(magic, "slmcc-aot-plan") != 0 || !version || strcmp(version, "1") != 0)
        die("not a version 1 plan (`slmcc-aot-plan 1`)", argv[1]);

    struct transfer *loads = NULL, *stores = NULL;
    struct kernel_call *calls = NULL;
    size_t nloads = 0, nstores = 0, ncalls = 0;
    char *cmd;
    while ((cmd = next_token())) {
        if (strcmp(cmd, "region") == 0) {
            if (nregions == MAX_REGIONS)
                die("too many regions", NULL);
            char *name = expect_token("a region name");
            if (strlen(name) >= NAME_LEN)
                die("region name too long", name);
            for (int i = 0; i < nregions; i++)
                if (strcmp(regions[i].name, name) == 0)
                    die("region declared twice", name);
            struct region *r = &regions[nregions++];
            strcpy(r->name, name);
            r->bytes = expect_size("region bytes");
        } else if (strcmp(cmd, "load") == 0 || strcmp(cmd, "store") == 0) {
            struct transfer t;
            t.at = expect_place();
            t.file = join(dir, expect_token("a file name"));
            if (cmd[0] == 'l') {
                loads = xrealloc(loads, (nloads + 1) * sizeof *loads);
                loads[nloads++] = t;
            } else {
                stores = xrealloc(stores, (nstores + 1) * sizeof *stores);
                stores[nstores++] = t;
            }
        } else if (strcmp(cmd, "kernel") == 0) {
            struct kernel_call c;
            c.entry = find_kernel(expect_token("a kernel symbol"));
            c.nbufs = expect_size("a buffer count");
            if (c.nbufs > 4096)
                die("too many buffers for one kernel", c.entry->symbol);
            c.bufs = xrealloc(NULL, c.nbufs * sizeof *c.bufs);
            for (size_t i = 0; i < c.nbufs; i++)
                c.bufs[i] = expect_place();
            calls = xrealloc(calls, (ncalls + 1) * sizeof *calls);
            calls[ncalls++] = c;
        } else {
            die("unknown plan command", cmd);
        }
    }

    for (int i = 0; i < nregions; i++) {
        /* Round up to the alignment (aligned_alloc requires it); never 0. */
        size_t n = (regions[i].bytes + 63) / 64 * 64;
        regions[i].mem = aligned_alloc(64, n ? n : 64);
        if (!regions[i].mem)
            die("cannot allocate region", regions[i].name);
        memset(regions[i].mem, 0, n ? n : 64);
    }
    for (size_t i = 0; i < nloads; i++)
        load(&loads[i]);

    uint8_t **ptrs = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t k = 0; k < ncalls; k++) {
        const struct kernel_call *c = &calls[k];
        ptrs = xrealloc(ptrs, c->nbufs * sizeof *ptrs);
        for (size_t i = 0; i < c->nbufs; i++)
            ptrs[i] = regions[c->bufs[i].region].mem + c->bufs[i].offset;
        int32_t status = c->entry->fn(ptrs);
        if (status != 0) {
            fprintf(stderr, "harness: kernel %s (call %zu) failed with status %d\n",
                    c->entry->symbol, k, (int)status);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (size_t i = 0; i < nstores; i++)
        store(&stores[i]);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("harness: ran %zu kernels in %.3f ms\n", ncalls, ms);
    return 0;
}
