/*
 * nvmlsim.c: the simulated GPU machine as a real libnvidia-ml.so.1, so that any program that loads
 * NVML (gputui without --demo, nvitop, gpustat, nvidia-ml-py's own tests) reads the same GPUs and
 * processes as gputui --demo.
 *
 * It computes nothing itself. The Python simulator writes its own NVML answers into a state file
 * (gputui/collect/sim/native/__init__.py: the format is described there), named by the environment
 * variable GPUTUI_SIM_STATE; this library replays them, reading the file again when it changes
 * (checked at most every 100 ms) and keeping the last good state when a new one does not parse.
 * Calls from many threads are serialised by one mutex, as the real driver does.
 *
 * Built at test or benchmark time: cc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 nvmlsim.c
 */

#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------ NVML's types, as pynvml lays them out */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6,
    INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, FUNCTION_NOT_FOUND = 13, VERSION_MISMATCH = 25,
};

#define MEMORY_V2 (40u | (2u << 24))      /* nvmlMemory_v2: sizeof | version << 24 */
#define TEMPERATURE_V1 (12u | (1u << 24)) /* nvmlTemperature_v1 */
#define UTILIZATION_INFO_V1 (24u | (1u << 24)) /* nvmlProcessesUtilizationInfo_v1 */

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* _v2 and _v3 share this layout */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct {
    unsigned long long timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;
typedef struct {
    unsigned int version, processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_t;

/* ------------------------------------------------------------------ the state file, parsed */

typedef struct { const char *key; int code; int ntok; char **tok; } Answer;
typedef struct { unsigned int pid; unsigned long long memory; unsigned int gi, ci; } Use;
typedef struct { unsigned int pid; unsigned long long stamp; unsigned int sm, mem, enc, dec; } Sample;
typedef struct { Use *items; int n; } Uses;

typedef struct {
    int parent; /* the whole GPU's section for a MIG device, else -1 */
    int lost;   /* found by UUID or bus id, it answers GPU_IS_LOST (its calls carry that code already) */
    const char *uuid, *bus_id;
    Answer *answers;
    int nanswers;
    Uses compute, graphics;
    Sample *samples;
    int nsamples;
} Device;

typedef struct { unsigned int pid; int code; const char *name; } Process;

typedef struct {
    char *text;        /* the file; every string below points into it */
    void **blocks;     /* everything else allocated for this state */
    int nblocks, cap;
    Answer *system;    /* answers before the first device */
    int nsystem;
    Device *devices;
    int ndevices, ngpus;
    Process *processes;
    int nprocesses;
    char **missing;    /* symbols this driver lacks: FUNCTION_NOT_FOUND */
    int nmissing;
} State;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static State *state;             /* the last good state, or NULL */
static int initialized;          /* nvmlInit calls not yet matched by nvmlShutdown */
static struct timespec checked;  /* when the file was last looked at */
static struct stat seen;         /* the file as last loaded (or rejected) */

static void *grab(State *s, size_t size) {
    if (s->nblocks == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        void **blocks = realloc(s->blocks, cap * sizeof *blocks);
        if (!blocks) return NULL;
        s->blocks = blocks, s->cap = cap;
    }
    void *p = calloc(1, size ? size : 1);
    if (p) s->blocks[s->nblocks++] = p;
    return p;
}

static void drop(State *s) {
    if (!s) return;
    for (int i = 0; i < s->nblocks; i++) free(s->blocks[i]);
    free(s->blocks);
    free(s->text);
    free(s);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Undo the writer's %XX escapes in place (texts may hold spaces, newlines, anything). */
static int unescape(char *t) {
    char *out = t;
    for (char *in = t; *in; in++) {
        if (*in == '%') {
            int hi = hexval(in[1]), lo = hi < 0 ? -1 : hexval(in[2]);
            if (lo < 0) return 0;
            *out++ = (char)(hi * 16 + lo);
            in += 2;
        } else {
            *out++ = *in;
        }
    }
    *out = 0;
    return 1;
}

static int number(const char *t, unsigned long long max, unsigned long long *out) {
    if (!t || !*t || *t == '-') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (errno || *end || v > max) return 0;
    *out = v;
    return 1;
}

static int integer(const char *t, int *out) {
    if (!t || !*t) return 0;
    char *end;
    errno = 0;
    long v = strtol(t, &end, 10);
    if (errno || *end || v < -2147483647L || v > 2147483647L) return 0;
    *out = (int)v;
    return 1;
}

/* Split one line into space-separated tokens, in place. */
static char **tokens(State *s, char *line, int *n) {
    int count = 0;
    for (char *p = line; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        count++;
        while (*p && *p != ' ') p++;
    }
    char **tok = grab(s, (count + 1) * sizeof *tok);
    if (!tok) return NULL;
    int i = 0;
    for (char *p = line; *p;) {
        while (*p == ' ') *p++ = 0;
        if (!*p) break;
        tok[i++] = p;
        while (*p && *p != ' ') p++;
    }
    *n = count;
    return tok;
}

static int parse_uses(State *s, Answer *a, Uses *out) {
    unsigned long long n, v[4];
    if (a->ntok < 1 || !number(a->tok[0], 1u << 24, &n) || (unsigned long long)a->ntok != 1 + 4 * n) return 0;
    out->items = grab(s, n * sizeof *out->items);
    if (!out->items) return 0;
    for (unsigned long long i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++)
            if (!number(a->tok[1 + 4 * i + k], k == 1 ? ~0ull : 0xFFFFFFFFull, &v[k])) return 0;
        out->items[i] = (Use){(unsigned)v[0], v[1], (unsigned)v[2], (unsigned)v[3]};
    }
    out->n = (int)n;
    return 1;
}

static int parse_samples(State *s, Answer *a, Device *d) {
    unsigned long long n, v[6];
    if (a->ntok < 1 || !number(a->tok[0], 1u << 24, &n) || (unsigned long long)a->ntok != 1 + 6 * n) return 0;
    d->samples = grab(s, n * sizeof *d->samples);
    if (!d->samples) return 0;
    for (unsigned long long i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++)
            if (!number(a->tok[1 + 6 * i + k], k == 1 ? ~0ull : 0xFFFFFFFFull, &v[k])) return 0;
        d->samples[i] = (Sample){(unsigned)v[0], v[1], (unsigned)v[2], (unsigned)v[3], (unsigned)v[4], (unsigned)v[5]};
    }
    d->nsamples = (int)n;
    return 1;
}

/* The state in ``text`` (taken over), or NULL when it is not a complete state of a known version. */
static State *parse(char *text) {
    State *s = calloc(1, sizeof *s);
    if (!s) { free(text); return NULL; }
    s->text = text;
    int nlines = 0;
    for (char *p = text; *p; p++) nlines += *p == '\n';
    char **lines = grab(s, (nlines + 1) * sizeof *lines);
    Answer *answers = grab(s, (nlines + 1) * sizeof *answers);
    s->devices = grab(s, (nlines + 1) * sizeof *s->devices);
    s->processes = grab(s, (nlines + 1) * sizeof *s->processes);
    s->missing = grab(s, (nlines + 1) * sizeof *s->missing);
    if (!lines || !answers || !s->devices || !s->processes || !s->missing) goto bad;
    int n = 0;
    for (char *p = text, *start = text; *p; p++)
        if (*p == '\n') { *p = 0; lines[n++] = start; start = p + 1; }
    if (n < 2 || strcmp(lines[0], "gputui-nvmlsim 1") || strcmp(lines[n - 1], "end")) goto bad;

    Device *d = NULL;
    int nanswers = 0;
    s->system = answers;
    for (int i = 1; i < n - 1; i++) {
        int ntok;
        char **tok = tokens(s, lines[i], &ntok);
        if (!tok || ntok == 0) goto bad;
        for (int k = 0; k < ntok; k++) if (!unescape(tok[k])) goto bad;
        if (!strcmp(tok[0], "device")) { /* device SECTION PARENT|- UUID BUSID|- LOST */
            int section, parent = -1, lost;
            if (ntok != 6 || !integer(tok[1], &section) || section != s->ndevices) goto bad;
            if (!integer(tok[5], &lost) || (lost != 0 && lost != 1)) goto bad;
            if (strcmp(tok[2], "-") && (!integer(tok[2], &parent) || parent < 0 || parent >= section)) goto bad;
            if (parent < 0 && s->ngpus != section) goto bad; /* whole GPUs come first */
            d = &s->devices[s->ndevices++];
            d->parent = parent, d->lost = lost, d->uuid = tok[3], d->bus_id = strcmp(tok[4], "-") ? tok[4] : NULL;
            d->answers = answers + nanswers;
            s->ngpus += parent < 0;
        } else if (!strcmp(tok[0], "process")) { /* process PID CODE [NAME] */
            unsigned long long pid;
            Process *p = &s->processes[s->nprocesses++];
            if (ntok < 3 || ntok > 4 || !number(tok[1], 0xFFFFFFFFull, &pid) || !integer(tok[2], &p->code)) goto bad;
            p->pid = (unsigned)pid, p->name = ntok == 4 ? tok[3] : "";
        } else if (!strcmp(tok[0], "missing")) { /* missing SYMBOL */
            if (ntok != 2) goto bad;
            s->missing[s->nmissing++] = tok[1];
        } else if (!strcmp(tok[0], "compute") || !strcmp(tok[0], "graphics") || !strcmp(tok[0], "samples")) {
            Answer a = {tok[0], OK, ntok - 1, tok + 1};
            if (!d) goto bad;
            if (tok[0][0] == 'c' ? !parse_uses(s, &a, &d->compute)
                : tok[0][0] == 'g' ? !parse_uses(s, &a, &d->graphics) : !parse_samples(s, &a, d)) goto bad;
        } else { /* SYMBOL[.ARG] CODE VALUE... */
            Answer *a = &answers[nanswers++];
            if (ntok < 2 || !integer(tok[1], &a->code)) goto bad;
            a->key = tok[0], a->ntok = ntok - 2, a->tok = tok + 2;
            if (d) d->nanswers++; else s->nsystem++;
        }
    }
    return s;
bad:
    drop(s);
    return NULL;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1) break;
        char *bigger = realloc(buf, cap *= 2);
        if (!bigger) { free(buf); buf = NULL; }
        else buf = bigger;
    }
    int failed = ferror(f);
    fclose(f);
    if (!buf || failed) { free(buf); return NULL; }
    buf[len] = 0;
    return buf;
}

/* Read the state file again if it changed; at most every 100 ms unless ``now`` (for nvmlInit). */
static void refresh(int now) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ms = (t.tv_sec - checked.tv_sec) * 1000LL + (t.tv_nsec - checked.tv_nsec) / 1000000;
    if (!now && state && ms < 100) return;
    checked = t;
    const char *path = getenv("GPUTUI_SIM_STATE");
    struct stat st;
    if (!path || !*path || stat(path, &st)) return;
    if (state && st.st_ino == seen.st_ino && st.st_size == seen.st_size
        && st.st_mtim.tv_sec == seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == seen.st_mtim.tv_nsec) return;
    char *text = slurp(path);
    State *fresh = text ? parse(text) : NULL;
    seen = st;
    if (fresh) { drop(state); state = fresh; }
}

/* ------------------------------------------------------------------ answering */

/* Every entry point starts here: the lock taken, the state fresh, a missing symbol refused. */
static nvmlReturn_t enter(const char *symbol, int need_init) {
    pthread_mutex_lock(&lock);
    refresh(0);
    if (need_init && (!initialized || !state)) return UNINITIALIZED;
    if (state)
        for (int i = 0; i < state->nmissing; i++)
            if (!strcmp(state->missing[i], symbol)) return FUNCTION_NOT_FOUND;
    return OK;
}

static nvmlReturn_t leave(nvmlReturn_t code) {
    pthread_mutex_unlock(&lock);
    return code;
}

#define HANDLE_BASE ((uintptr_t)0x5EED00001000ull)

static Device *device_of(nvmlDevice_t handle) {
    uintptr_t v = (uintptr_t)handle;
    if (v < HANDLE_BASE || v - HANDLE_BASE >= (uintptr_t)state->ndevices) return NULL;
    return &state->devices[v - HANDLE_BASE];
}

static nvmlDevice_t handle_of(int section) { return (nvmlDevice_t)(HANDLE_BASE + (uintptr_t)section); }

static Answer *find(Answer *answers, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(answers[i].key, key)) return &answers[i];
    return NULL;
}

/*
 * The answer of ``handle``'s device to ``key`` (a symbol, or "symbol.ARG" for calls that take a kind).
 * Returns the code to give back: the device's own error, or OK with *out set. A symbol the state does
 * not mention is NOT_SUPPORTED; a kind it does not mention answers as "symbol.*" does, or else
 * INVALID_ARGUMENT.
 */
static nvmlReturn_t lookup(nvmlDevice_t handle, const char *symbol, long arg, int ntok, Answer **out) {
    Device *d = device_of(handle);
    if (!d) return INVALID_ARGUMENT;
    char key[96];
    if (arg >= 0) snprintf(key, sizeof key, "%s.%ld", symbol, arg);
    Answer *a = find(d->answers, d->nanswers, arg >= 0 ? key : symbol);
    if (!a && arg >= 0) { /* "symbol.*": the answer to every kind not named */
        snprintf(key, sizeof key, "%s.*", symbol);
        a = find(d->answers, d->nanswers, key);
    }
    if (!a) return arg >= 0 ? INVALID_ARGUMENT : NOT_SUPPORTED;
    if (a->code) return a->code;
    if (a->ntok < ntok) return NOT_SUPPORTED;
    *out = a;
    return OK;
}

static unsigned long long tok_u(Answer *a, int i) { return strtoull(a->tok[i], NULL, 10); }

static nvmlReturn_t put_text(char *buf, unsigned int length, const char *text) {
    size_t n = strlen(text);
    if (!buf || n + 1 > length) return INSUFFICIENT_SIZE;
    memcpy(buf, text, n + 1);
    return OK;
}

static nvmlReturn_t uint_answer(const char *symbol, nvmlDevice_t h, long arg, unsigned int *out) {
    nvmlReturn_t code = enter(symbol, 1);
    Answer *a;
    if (code || (code = lookup(h, symbol, arg, 1, &a))) return leave(code);
    if (!out) return leave(INVALID_ARGUMENT);
    *out = (unsigned int)tok_u(a, 0);
    return leave(OK);
}

static nvmlReturn_t ull_answer(const char *symbol, nvmlDevice_t h, long arg, unsigned long long *out) {
    nvmlReturn_t code = enter(symbol, 1);
    Answer *a;
    if (code || (code = lookup(h, symbol, arg, 1, &a))) return leave(code);
    if (!out) return leave(INVALID_ARGUMENT);
    *out = tok_u(a, 0);
    return leave(OK);
}

static nvmlReturn_t text_answer(const char *symbol, nvmlDevice_t h, char *buf, unsigned int length) {
    nvmlReturn_t code = enter(symbol, 1);
    Answer *a;
    if (code || (code = lookup(h, symbol, -1, 1, &a))) return leave(code);
    return leave(put_text(buf, length, a->tok[0]));
}

static nvmlReturn_t system_answer(const char *symbol, int need_init, Answer **out) {
    nvmlReturn_t code = enter(symbol, need_init);
    if (code) return code;
    if (!state) return NOT_SUPPORTED;
    Answer *a = find(state->system, state->nsystem, symbol);
    if (!a) return NOT_SUPPORTED;
    if (a->code) return a->code;
    if (a->ntok < 1) return NOT_SUPPORTED;
    *out = a;
    return OK;
}

/* ------------------------------------------------------------------ library and system */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    refresh(1);
    if (!state) return leave(DRIVER_NOT_LOADED);
    initialized++;
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    if (!initialized) return leave(UNINITIALIZED);
    initialized--;
    return leave(OK);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 25: return "Argument Version Mismatch";
    case 26: return "Deprecated";
    case 27: return "Not Ready";
    case 28: return "GPU Not Found";
    case 29: return "Invalid State";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t system_text(const char *symbol, int need_init, char *buf, unsigned int length) {
    Answer *a;
    nvmlReturn_t code = system_answer(symbol, need_init, &a);
    return leave(code ? code : put_text(buf, length, a->tok[0]));
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int length) {
    return system_text("nvmlSystemGetDriverVersion", 1, buf, length);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int length) {
    return system_text("nvmlSystemGetNVMLVersion", 0, buf, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *out) {
    Answer *a;
    nvmlReturn_t code = system_answer("nvmlSystemGetCudaDriverVersion", 0, &a);
    if (!code && out) *out = atoi(a->tok[0]);
    return leave(code ? code : out ? OK : INVALID_ARGUMENT);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *out) { return nvmlSystemGetCudaDriverVersion(out); }

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *buf, unsigned int length) {
    nvmlReturn_t code = enter("nvmlSystemGetProcessName", 1);
    if (code) return leave(code);
    for (int i = 0; i < state->nprocesses; i++) {
        Process *p = &state->processes[i];
        if (p->pid == pid) return leave(p->code ? p->code : put_text(buf, length, p->name));
    }
    return leave(NOT_FOUND);
}

/* ------------------------------------------------------------------ finding devices */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t code = enter("nvmlDeviceGetCount_v2", 1);
    if (code) return leave(code);
    if (!count) return leave(INVALID_ARGUMENT);
    *count = (unsigned int)state->ngpus;
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *out) {
    nvmlReturn_t code = enter("nvmlDeviceGetHandleByIndex_v2", 1);
    if (code) return leave(code);
    if (!out || index >= (unsigned int)state->ngpus) return leave(INVALID_ARGUMENT);
    *out = handle_of((int)index);
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *out) {
    return nvmlDeviceGetHandleByIndex_v2(index, out);
}

/* The first device (whole GPUs first, then MIG devices) whose UUID is ``uuid`` or, for whole GPUs,
 * whose PCI bus id ends as ``bus_id`` does (its domain may be written with 4 or 8 digits). */
static nvmlReturn_t handle_where(const char *symbol, const char *uuid, const char *bus_id, nvmlDevice_t *out) {
    nvmlReturn_t code = enter(symbol, 1);
    if (code) return leave(code);
    if (!out || !(uuid || bus_id)) return leave(INVALID_ARGUMENT);
    for (int i = 0; i < state->ndevices; i++) {
        Device *d = &state->devices[i];
        int match;
        if (uuid) {
            match = !strcmp(d->uuid, uuid);
        } else {
            size_t n = strlen(bus_id), m = d->bus_id ? strlen(d->bus_id) : 0;
            match = d->bus_id && n >= 7 && m >= 7 && !strcasecmp(d->bus_id + m - 7, bus_id + n - 7);
        }
        if (!match) continue;
        if (d->lost) return leave(15); /* GPU_IS_LOST: found, and it says so */
        *out = handle_of(i);
        return leave(OK);
    }
    return leave(NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out) {
    return uuid ? handle_where("nvmlDeviceGetHandleByUUID", uuid, NULL, out) : INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *out) {
    return bus_id ? handle_where("nvmlDeviceGetHandleByPciBusId_v2", NULL, bus_id, out) : INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *out) {
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, out);
}

/* ------------------------------------------------------------------ one-number answers */

#define UINT_CALL(name) \
    EXPORT nvmlReturn_t name(nvmlDevice_t h, unsigned int *out) { return uint_answer(#name, h, -1, out); }
#define KIND_CALL(name) \
    EXPORT nvmlReturn_t name(nvmlDevice_t h, int kind, unsigned int *out) { \
        return kind < 0 ? INVALID_ARGUMENT : uint_answer(#name, h, kind, out); }

UINT_CALL(nvmlDeviceGetIndex)
UINT_CALL(nvmlDeviceGetMinorNumber)
UINT_CALL(nvmlDeviceGetPersistenceMode)
UINT_CALL(nvmlDeviceGetComputeMode)
UINT_CALL(nvmlDeviceGetDisplayMode)
UINT_CALL(nvmlDeviceGetDisplayActive)
UINT_CALL(nvmlDeviceGetFanSpeed)
UINT_CALL(nvmlDeviceGetPowerUsage)
UINT_CALL(nvmlDeviceGetEnforcedPowerLimit)
UINT_CALL(nvmlDeviceGetPowerManagementLimit)
UINT_CALL(nvmlDeviceGetPerformanceState)
UINT_CALL(nvmlDeviceGetCurrPcieLinkGeneration)
UINT_CALL(nvmlDeviceGetMaxPcieLinkGeneration)
UINT_CALL(nvmlDeviceGetCurrPcieLinkWidth)
UINT_CALL(nvmlDeviceGetMaxPcieLinkWidth)
UINT_CALL(nvmlDeviceIsMigDeviceHandle)
UINT_CALL(nvmlDeviceGetGpuInstanceId)
UINT_CALL(nvmlDeviceGetComputeInstanceId)
UINT_CALL(nvmlDeviceGetMaxMigDeviceCount)
KIND_CALL(nvmlDeviceGetClockInfo)
KIND_CALL(nvmlDeviceGetMaxClockInfo)
KIND_CALL(nvmlDeviceGetTemperature)
KIND_CALL(nvmlDeviceGetTemperatureThreshold)
KIND_CALL(nvmlDeviceGetPcieThroughput)

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *out) {
    return ull_answer("nvmlDeviceGetCurrentClocksEventReasons", h, -1, out);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *out) {
    return ull_answer("nvmlDeviceGetCurrentClocksThrottleReasons", h, -1, out);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *out) {
    (void)counter; /* volatile and aggregate counts are the same on a simulated board */
    return type < 0 ? INVALID_ARGUMENT : ull_answer("nvmlDeviceGetTotalEccErrors", h, type, out);
}

/* ------------------------------------------------------------------ identity */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *buf, unsigned int length) {
    return text_answer("nvmlDeviceGetName", h, buf, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int length) {
    return text_answer("nvmlDeviceGetUUID", h, buf, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    nvmlReturn_t code = enter("nvmlDeviceGetPciInfo_v3", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetPciInfo_v3", -1, 7, &a))) return leave(code);
    if (!pci) return leave(INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", a->tok[0]);
    pci->domain = (unsigned)tok_u(a, 1), pci->bus = (unsigned)tok_u(a, 2), pci->device = (unsigned)tok_u(a, 3);
    pci->pciDeviceId = (unsigned)tok_u(a, 4), pci->pciSubSystemId = (unsigned)tok_u(a, 5);
    snprintf(pci->busId, sizeof pci->busId, "%s", a->tok[6]);
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor) {
    nvmlReturn_t code = enter("nvmlDeviceGetCudaComputeCapability", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetCudaComputeCapability", -1, 2, &a))) return leave(code);
    if (!major || !minor) return leave(INVALID_ARGUMENT);
    *major = atoi(a->tok[0]), *minor = atoi(a->tok[1]);
    return leave(OK);
}

/* ------------------------------------------------------------------ memory and utilisation */

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *mem) {
    nvmlReturn_t code = enter("nvmlDeviceGetMemoryInfo", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetMemoryInfo", -1, 3, &a))) return leave(code);
    if (!mem) return leave(INVALID_ARGUMENT);
    mem->total = tok_u(a, 0), mem->free = tok_u(a, 1), mem->used = tok_u(a, 2);
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *mem) {
    nvmlReturn_t code = enter("nvmlDeviceGetMemoryInfo_v2", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetMemoryInfo_v2", -1, 4, &a))) return leave(code);
    if (!mem) return leave(INVALID_ARGUMENT);
    if (mem->version != MEMORY_V2) return leave(VERSION_MISMATCH);
    mem->total = tok_u(a, 0), mem->reserved = tok_u(a, 1), mem->free = tok_u(a, 2), mem->used = tok_u(a, 3);
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *util) {
    nvmlReturn_t code = enter("nvmlDeviceGetUtilizationRates", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetUtilizationRates", -1, 2, &a))) return leave(code);
    if (!util) return leave(INVALID_ARGUMENT);
    util->gpu = (unsigned)tok_u(a, 0), util->memory = (unsigned)tok_u(a, 1);
    return leave(OK);
}

static nvmlReturn_t pair_answer(const char *symbol, nvmlDevice_t h, unsigned int *first, unsigned int *second) {
    nvmlReturn_t code = enter(symbol, 1);
    Answer *a;
    if (code || (code = lookup(h, symbol, -1, 2, &a))) return leave(code);
    if (!first || !second) return leave(INVALID_ARGUMENT);
    *first = (unsigned)tok_u(a, 0), *second = (unsigned)tok_u(a, 1);
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t h, unsigned int *util, unsigned int *period) {
    return pair_answer("nvmlDeviceGetEncoderUtilization", h, util, period);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t h, unsigned int *util, unsigned int *period) {
    return pair_answer("nvmlDeviceGetDecoderUtilization", h, util, period);
}

/* Windows driver models (WDDM, TCC): a Linux driver answers NOT_SUPPORTED, as the state file does
 * by not naming them; real drivers export the symbols, and nvitop asks. */
EXPORT nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
    return pair_answer("nvmlDeviceGetDriverModel_v2", h, current, pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
    return pair_answer("nvmlDeviceGetDriverModel", h, current, pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
    return pair_answer("nvmlDeviceGetMigMode", h, current, pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t h, nvmlTemperature_t *temp) {
    nvmlReturn_t code = enter("nvmlDeviceGetTemperatureV", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetTemperatureV", -1, 1, &a))) return leave(code);
    if (!temp) return leave(INVALID_ARGUMENT);
    if (temp->version != TEMPERATURE_V1) return leave(VERSION_MISMATCH);
    if (temp->sensorType != 0) return leave(INVALID_ARGUMENT); /* only the GPU's own sensor */
    temp->temperature = atoi(a->tok[0]);
    return leave(OK);
}

/* ------------------------------------------------------------------ MIG */

static nvmlReturn_t handle_answer(const char *symbol, nvmlDevice_t h, long arg, nvmlDevice_t *out) {
    nvmlReturn_t code = enter(symbol, 1);
    Answer *a;
    if (code || (code = lookup(h, symbol, arg, 1, &a))) return leave(code);
    unsigned long long section = tok_u(a, 0);
    if (!out || section >= (unsigned long long)state->ndevices) return leave(INVALID_ARGUMENT);
    *out = handle_of((int)section);
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index, nvmlDevice_t *out) {
    return handle_answer("nvmlDeviceGetMigDeviceHandleByIndex", h, index > 4096 ? 4096 : (long)index, out);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t h, nvmlDevice_t *out) {
    return handle_answer("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h, -1, out);
}

/* ------------------------------------------------------------------ processes */

/* NVML's two-call protocol: too small a buffer (or none) gets the count and INSUFFICIENT_SIZE. */
static nvmlReturn_t running(const char *symbol, int graphics, int version, nvmlDevice_t h,
                            unsigned int *count, void *infos) {
    nvmlReturn_t code = enter(symbol, 1);
    Answer *a;
    if (code || (code = lookup(h, symbol, -1, 0, &a))) return leave(code);
    if (!count) return leave(INVALID_ARGUMENT);
    Device *d = device_of(h);
    Uses *uses = graphics ? &d->graphics : &d->compute;
    unsigned int n = (unsigned int)uses->n;
    if (!infos || *count < n) {
        *count = n;
        return leave(n ? INSUFFICIENT_SIZE : OK);
    }
    for (unsigned int i = 0; i < n; i++) {
        Use *u = &uses->items[i];
        if (version == 1)
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){u->pid, u->memory};
        else
            ((nvmlProcessInfo_t *)infos)[i] = (nvmlProcessInfo_t){u->pid, u->memory, u->gi, u->ci};
    }
    *count = n;
    return leave(OK);
}

#define RUNNING_CALL(name, graphics, version) \
    EXPORT nvmlReturn_t name(nvmlDevice_t h, unsigned int *count, void *infos) { \
        return running(#name, graphics, version, h, count, infos); }

RUNNING_CALL(nvmlDeviceGetComputeRunningProcesses_v3, 0, 3)
RUNNING_CALL(nvmlDeviceGetComputeRunningProcesses_v2, 0, 2)
RUNNING_CALL(nvmlDeviceGetComputeRunningProcesses, 0, 1)
RUNNING_CALL(nvmlDeviceGetGraphicsRunningProcesses_v3, 1, 3)
RUNNING_CALL(nvmlDeviceGetGraphicsRunningProcesses_v2, 1, 2)
RUNNING_CALL(nvmlDeviceGetGraphicsRunningProcesses, 1, 1)

/* Samples newer than ``since``; NOT_FOUND when none (nothing ran since then), as the driver says. */
static nvmlReturn_t samples_since(const char *symbol, nvmlDevice_t h, unsigned long long since,
                                  Sample **rows, unsigned int *n) {
    Answer *a;
    nvmlReturn_t code = lookup(h, symbol, -1, 0, &a);
    if (code) return code;
    Device *d = device_of(h);
    *n = 0;
    *rows = d->samples;
    for (int i = 0; i < d->nsamples; i++) *n += d->samples[i].stamp > since;
    return *n ? OK : NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *out,
                                                    unsigned int *count, unsigned long long since) {
    nvmlReturn_t code = enter("nvmlDeviceGetProcessUtilization", 1);
    Sample *rows;
    unsigned int n;
    if (code || (code = samples_since("nvmlDeviceGetProcessUtilization", h, since, &rows, &n))) return leave(code);
    if (!count) return leave(INVALID_ARGUMENT);
    if (!out || *count < n) {
        *count = n;
        return leave(INSUFFICIENT_SIZE);
    }
    unsigned int k = 0;
    for (int i = 0; i < device_of(h)->nsamples; i++)
        if (rows[i].stamp > since)
            out[k++] = (nvmlProcessUtilizationSample_t){rows[i].pid, rows[i].stamp, rows[i].sm, rows[i].mem,
                                                        rows[i].enc, rows[i].dec};
    *count = n;
    return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t h, nvmlProcessesUtilizationInfo_t *info) {
    nvmlReturn_t code = enter("nvmlDeviceGetProcessesUtilizationInfo", 1);
    Answer *a;
    if (code || (code = lookup(h, "nvmlDeviceGetProcessesUtilizationInfo", -1, 0, &a))) return leave(code);
    if (!info) return leave(INVALID_ARGUMENT);
    if (info->version != UTILIZATION_INFO_V1) return leave(VERSION_MISMATCH);
    Sample *rows;
    unsigned int n;
    if ((code = samples_since("nvmlDeviceGetProcessesUtilizationInfo", h, info->lastSeenTimeStamp, &rows, &n)))
        return leave(code);
    if (!info->procUtilArray || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        return leave(INSUFFICIENT_SIZE);
    }
    unsigned int k = 0;
    for (int i = 0; i < device_of(h)->nsamples; i++)
        if (rows[i].stamp > info->lastSeenTimeStamp)
            info->procUtilArray[k++] = (nvmlProcessUtilizationInfo_v1_t){
                rows[i].stamp, rows[i].pid, rows[i].sm, rows[i].mem, rows[i].enc, rows[i].dec, 0, 0};
    info->processSamplesCount = n;
    return leave(OK);
}
