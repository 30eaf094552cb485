/* ZapFormat's compiled core (rayml.decoding._zapcore): the vocabulary-trie walks and the
 * bitmask fill of "Earley-Driven Dynamic Pruning for Efficient Structured Decoding" (ZapFormat,
 * ICML 2025), in plain C over integer state ids (no Cython, no NumPy C API: arrays travel through
 * the buffer protocol, results come back as bytes or lists).
 *
 * The vocabulary trie is scanned in sorted-token order (a preorder of the trie): token i shares
 * its first lcp[i] bytes with token i - 1, so only bytes lcp[i] .. len[i] - 1 are stepped and the
 * DFA states of the shared prefix are reused from a per-depth stack. The trie nodes a token opens
 * (depths lcp[i] + 1 .. len[i]) are consecutive preorder ids starting at node_start[i], and the
 * bytes are read per node (node_byte: one byte per trie node, a few hundred KiB); when a
 * prefix is rejected the scan jumps past that node's subtree (tok_end[node]): the rejected-prefix
 * cache of the paper's engine, applied to the whole vocabulary walk.
 *
 * Functions (all exact; the pure-Python engine in matcher.py is the reference they are tested
 * against bit for bit):
 *   trie(node_byte, lens, lcp, node_start, tok_end, node_depth, node_m, order, max_len, tok_start)
 *   or_into(out, arrays): out = the OR of the packed uint32 arrays (one pass each)
 *   walk(trie, trans, accept, s, words) -> [(depth, node, state)]   (inside tokens OR-ed into words)
 *   walk_counted(trie, local, i, words) -> (ids int64, keys int64, closing list): the inside tokens
 *       sorted (stable counting sort) by key 2 * characters + (not between characters), their bits
 *       OR-ed into words
 *   literal(trie, rest, words) -> (depth, node) or None: the tokens that are non-empty prefixes of
 *       rest OR-ed into words, and the trie node of rest when longer tokens start with it
 *   set_bits(words, ids) / clear_bits(words, ids): OR in / clear the bits of int64 token ids.
 *   fill_rows(bitmask, rows, words_list): copy packed words into bitmask rows (the batch fill).
 *   horizon_classes / literal_rest / count_cut: the per-state setup of a first visit (below).
 *   Engine: the Earley engine over integer state ids (native_earley.py), with simulate (the trie
 *       walk below an exit node) and exits_into (those walks, memoised per (chart, node), OR-ed
 *       into a mask), and set_masks / mask_into: a state's whole mask after a state-cache miss (the
 *       terminal infos, counted-string cuts and contributions in C tables keyed by integer ids).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

typedef struct {
    Py_ssize_t n;        /* tokens in sorted order */
    Py_ssize_t n_nodes;  /* trie nodes */
    int max_len;
    uint8_t *node_byte;  /* [n_nodes] the byte leading into each preorder node */
    int32_t *lens, *lcp, *node_start;
    int32_t *tok_end, *node_depth, *node_m, *tok_start;  /* per preorder node */
    int64_t *order;      /* token id of each sorted position */
    int32_t root_child[256];  /* the depth-1 node of each first byte, -1: no token starts with it */
    int64_t *scratch_ids;  /* [n] reused by walk_counted (no fresh pages per call) */
    uint16_t *scratch_keys;
} Trie;

static void trie_free(PyObject *cap) {
    Trie *t = (Trie *)PyCapsule_GetPointer(cap, "zapcore.trie");
    if (!t) return;
    free(t->node_byte); free(t->lens); free(t->lcp); free(t->node_start);
    free(t->tok_end); free(t->node_depth); free(t->node_m); free(t->order); free(t->tok_start);
    free(t->scratch_ids); free(t->scratch_keys);
    free(t);
}

/* copy a contiguous buffer of exactly `count` items of `itemsize` bytes */
static void *copy_buf(PyObject *obj, Py_ssize_t itemsize, Py_ssize_t *count, const char *name) {
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (b.itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd-byte items, got %zd", name, itemsize, b.itemsize);
        PyBuffer_Release(&b);
        return NULL;
    }
    Py_ssize_t k = b.len / itemsize;
    if (*count >= 0 && k != *count) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd items, got %zd", name, *count, k);
        PyBuffer_Release(&b);
        return NULL;
    }
    void *out = malloc(b.len ? b.len : 1);
    if (!out) { PyBuffer_Release(&b); PyErr_NoMemory(); return NULL; }
    memcpy(out, b.buf, b.len);
    *count = k;
    PyBuffer_Release(&b);
    return out;
}

static PyObject *py_trie(PyObject *self, PyObject *args) {
    PyObject *node_byte, *lens, *lcp, *node_start, *tok_end, *node_depth, *node_m, *order, *tok_start;
    int max_len;
    if (!PyArg_ParseTuple(args, "OOOOOOOOiO", &node_byte, &lens, &lcp, &node_start, &tok_end, &node_depth,
                          &node_m, &order, &max_len, &tok_start))
        return NULL;
    Trie *t = calloc(1, sizeof(Trie));
    if (!t) return PyErr_NoMemory();
    Py_ssize_t n = -1, nn = -1;
    t->lens = copy_buf(lens, 4, &n, "lens");
    if (!t->lens) goto fail;
    t->n = n;
    t->max_len = max_len;
    t->lcp = copy_buf(lcp, 4, &n, "lcp");
    if (!t->lcp) goto fail;
    t->node_start = copy_buf(node_start, 4, &n, "node_start");
    if (!t->node_start) goto fail;
    t->order = copy_buf(order, 8, &n, "order");
    if (!t->order) goto fail;
    t->tok_end = copy_buf(tok_end, 4, &nn, "tok_end");
    if (!t->tok_end) goto fail;
    t->n_nodes = nn;
    t->node_byte = copy_buf(node_byte, 1, &nn, "node_byte");
    if (!t->node_byte) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {  /* every node a token opens must exist */
        if (t->lcp[i] < 0 || t->lcp[i] > t->lens[i] || t->lens[i] > max_len
            || (t->lens[i] > t->lcp[i] && (t->node_start[i] < 0 || t->node_start[i] + t->lens[i] - t->lcp[i] > nn))) {
            PyErr_SetString(PyExc_ValueError, "inconsistent trie arrays");
            goto fail;
        }
    }
    t->node_depth = copy_buf(node_depth, 4, &nn, "node_depth");
    if (!t->node_depth) goto fail;
    t->node_m = copy_buf(node_m, 4, &nn, "node_m");
    if (!t->node_m) goto fail;
    t->tok_start = copy_buf(tok_start, 4, &nn, "tok_start");
    if (!t->tok_start) goto fail;
    for (int b = 0; b < 256; b++) t->root_child[b] = -1;
    for (Py_ssize_t g = 0; g < nn; g++) {
        if (t->tok_start[g] < 0 || t->tok_start[g] >= n || t->tok_end[g] < 0 || t->tok_end[g] > n) {
            PyErr_SetString(PyExc_ValueError, "inconsistent trie arrays");
            goto fail;
        }
        if (t->node_depth[g] == 1) t->root_child[t->node_byte[g]] = (int32_t)g;
    }
    PyObject *cap = PyCapsule_New(t, "zapcore.trie", trie_free);
    if (!cap) goto fail;
    return cap;
fail:
    free(t->node_byte); free(t->lens); free(t->lcp); free(t->node_start);
    free(t->tok_end); free(t->node_depth); free(t->node_m); free(t->order); free(t->tok_start);
    free(t);
    return NULL;
}

static Trie *get_trie(PyObject *cap) {
    return (Trie *)PyCapsule_GetPointer(cap, "zapcore.trie");
}

static int get_rw(PyObject *obj, Py_buffer *b, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd-byte items, got %zd", name, itemsize, b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static int get_ro(PyObject *obj, Py_buffer *b, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd-byte items, got %zd", name, itemsize, b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* the walk of TokenIndex.walk from DFA state s0 over the sorted trie: the inside tokens are OR-ed
 * into words; each exit (depth d, preorder node g, accepting state a) goes to on_exit(ctx, ...), which
 * returns -1 (an exception set) to stop. Returns 0, or -1 with an exception set. */
typedef int (*exit_fn)(void *ctx, int d, int32_t g, int32_t a);

static int walk_core(const Trie *t, const int32_t *trans, const uint8_t *acc, int32_t s0, uint32_t *words,
                     Py_ssize_t n_words, exit_fn on_exit, void *ctx) {
    int32_t *st = malloc(sizeof(int32_t) * (t->max_len + 2));
    if (!st) { PyErr_NoMemory(); return -1; }
    st[0] = s0;
    Py_ssize_t i = 0;
    while (i < t->n) {
        int l = t->lcp[i], L = t->lens[i];
        int32_t g = t->node_start[i];
        int dead = 0;
        for (int d = l; d < L; d++, g++) {
            int32_t s2 = trans[(Py_ssize_t)st[d] * 256 + t->node_byte[g]];
            if (s2 < 0) { dead = 1; break; }
            st[d + 1] = s2;
            if (acc[s2] && on_exit(ctx, d + 1, g, s2) < 0) { free(st); return -1; }
        }
        if (dead) { i = t->tok_end[g]; continue; }  /* skip the rejected node's subtree */
        int64_t id = t->order[i];
        if (id >> 5 < n_words) words[id >> 5] |= (uint32_t)1 << (id & 31);
        i++;
    }
    free(st);
    return 0;
}

typedef struct { PyObject *list; const Trie *t; } ExitList;

static int exit_to_list(void *ctx, int d, int32_t g, int32_t a) {
    ExitList *x = ctx;
    PyObject *e = Py_BuildValue("(iii)", d, x->t->node_m[g], a);
    if (!e || PyList_Append(x->list, e) < 0) { Py_XDECREF(e); return -1; }
    Py_DECREF(e);
    return 0;
}

/* walk(trie, trans int32[S, 256], accept uint8[S], s, words uint32[W]) -> [(depth, node, state)] */
static PyObject *py_walk(PyObject *self, PyObject *args) {
    PyObject *cap, *o_trans, *o_acc, *o_words;
    int s0;
    if (!PyArg_ParseTuple(args, "OOOiO", &cap, &o_trans, &o_acc, &s0, &o_words)) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    Py_buffer bt, ba, bw;
    if (get_ro(o_trans, &bt, 4, "trans") < 0) return NULL;
    if (get_ro(o_acc, &ba, 1, "accept") < 0) { PyBuffer_Release(&bt); return NULL; }
    if (get_rw(o_words, &bw, 4, "words") < 0) { PyBuffer_Release(&bt); PyBuffer_Release(&ba); return NULL; }
    Py_ssize_t n_states = ba.len;
    PyObject *exits = NULL;
    if (bt.len != n_states * 256 * 4 || s0 < 0 || s0 >= n_states) {
        PyErr_SetString(PyExc_ValueError, "trans must be int32 [S, 256] with accept [S] and 0 <= s < S");
        goto done;
    }
    exits = PyList_New(0);
    if (!exits) goto done;
    ExitList x = {exits, t};
    if (walk_core(t, bt.buf, ba.buf, s0, bw.buf, bw.len / 4, exit_to_list, &x) < 0) Py_CLEAR(exits);
done:
    PyBuffer_Release(&bt); PyBuffer_Release(&ba); PyBuffer_Release(&bw);
    return exits;
}

/* walk_counted(trie, local int32[w, 256], i, words uint32[W]): see TokenIndex.walk_counted */
static PyObject *py_walk_counted(PyObject *self, PyObject *args) {
    PyObject *cap, *o_local, *o_words;
    int i0;
    if (!PyArg_ParseTuple(args, "OOiO", &cap, &o_local, &i0, &o_words)) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    Py_buffer bl, bw;
    if (get_ro(o_local, &bl, 4, "local") < 0) return NULL;
    if (get_rw(o_words, &bw, 4, "words") < 0) { PyBuffer_Release(&bl); return NULL; }
    uint32_t *words = bw.buf;
    Py_ssize_t n_words = bw.len / 4;
    const int32_t *local = bl.buf;
    int32_t w = (int32_t)(bl.len / (256 * 4));
    PyObject *result = NULL, *closing = NULL;
    int32_t *st = NULL, *cnt = NULL;
    int64_t *ids = NULL;
    uint16_t *keys = NULL;
    Py_ssize_t *bucket = NULL;
    PyObject *b_ids = NULL, *b_keys = NULL;
    Py_ssize_t k = 0;
    int64_t kmax = 0;
    if (bl.len != (Py_ssize_t)w * 256 * 4 || i0 < 0 || i0 >= w) {
        PyErr_SetString(PyExc_ValueError, "local must be int32 [w, 256] and 0 <= i < w");
        goto done;
    }
    st = malloc(sizeof(int32_t) * (t->max_len + 2));
    cnt = malloc(sizeof(int32_t) * (t->max_len + 2));
    if (!t->scratch_ids) t->scratch_ids = malloc(sizeof(int64_t) * (t->n + 1));
    if (!t->scratch_keys) t->scratch_keys = malloc(sizeof(uint16_t) * (t->n + 1));
    ids = t->scratch_ids;
    keys = t->scratch_keys;
    closing = PyList_New(0);
    if (!st || !cnt || !ids || !keys || !closing) { PyErr_NoMemory(); goto done; }
    if (2 * (int64_t)t->max_len + 1 > 65535) { PyErr_SetString(PyExc_ValueError, "tokens too long"); goto done; }
    st[0] = i0;
    cnt[0] = 0;
    {
        const int32_t *restrict lcp = t->lcp, *restrict lens = t->lens, *restrict nstart = t->node_start;
        const int32_t *restrict tend = t->tok_end;
        const uint8_t *restrict nb = t->node_byte;
        const int64_t *restrict order = t->order;
        Py_ssize_t i = 0, n = t->n;
        while (i < n) {
            int l = lcp[i], L = lens[i];
            int32_t g = nstart[i];
            int32_t s_ = st[l], c_ = cnt[l];
            int dead = 0;
            for (int d = l; d < L; d++, g++) {
                int32_t v = local[(Py_ssize_t)s_ * 256 + nb[g]];
                if ((uint32_t)v >= (uint32_t)w) {  /* a finished character, the closing quote, or dead */
                    if (v == w) { s_ = 0; c_++; }
                    else {
                        if (v == w + 1) {  /* the closing quote: recorded with the count before it */
                            PyObject *e = Py_BuildValue("(iii)", d + 1, t->node_m[g], c_);
                            if (!e || PyList_Append(closing, e) < 0) { Py_XDECREF(e); goto done; }
                            Py_DECREF(e);
                        }
                        dead = 1;
                        break;
                    }
                } else s_ = v;
                st[d + 1] = s_;
                cnt[d + 1] = c_;
            }
            if (dead) { i = tend[g]; continue; }
            int64_t id = order[i];
            int64_t key = 2 * (int64_t)c_ + (s_ != 0);
            ids[k] = id;
            keys[k] = (uint16_t)key;
            if (key > kmax) kmax = key;
            if (id >> 5 < n_words) words[id >> 5] |= (uint32_t)1 << (id & 31);
            k++;
            i++;
        }
    }
    /* stable counting sort by key (keys are at most 2 * max_len + 1) */
    bucket = calloc(kmax + 2, sizeof(Py_ssize_t));
    b_ids = PyBytes_FromStringAndSize(NULL, k * 8);
    b_keys = PyBytes_FromStringAndSize(NULL, k * 8);
    if (!bucket || !b_ids || !b_keys) { if (!bucket) PyErr_NoMemory(); goto done; }
    {
        int64_t *s_ids = (int64_t *)PyBytes_AS_STRING(b_ids), *s_keys = (int64_t *)PyBytes_AS_STRING(b_keys);
        for (Py_ssize_t j = 0; j < k; j++) bucket[keys[j] + 1]++;
        for (int64_t b = 1; b <= kmax + 1; b++) bucket[b] += bucket[b - 1];
        for (Py_ssize_t j = 0; j < k; j++) {
            Py_ssize_t at = bucket[keys[j]]++;
            s_ids[at] = ids[j];
            s_keys[at] = keys[j];
        }
    }
    result = Py_BuildValue("(OOO)", b_ids, b_keys, closing);
done:
    Py_XDECREF(closing);
    Py_XDECREF(b_ids);
    Py_XDECREF(b_keys);
    free(st); free(cnt); free(bucket);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bw);
    return result;
}

/* literal(trie, rest bytes, words uint32[W]): see TokenIndex.literal. Children of a node are
 * found by a sibling scan in sorted order: the child at depth D opened by token j is node
 * node_start[j] + D - 1 - lcp[j], and its next sibling is opened by token tok_end[child].
 * literal_core returns the preorder node of rest when longer tokens start with it, else -1. */
static int32_t literal_core(const Trie *t, const uint8_t *rest, Py_ssize_t n_rest, uint32_t *words,
                            Py_ssize_t n_words) {
    Py_ssize_t a = 0, e = t->n, j = 0, ends = 0;
    int32_t c = -1;
    for (Py_ssize_t d = 0; d < n_rest; d++) {
        int D = (int)d + 1;
        uint8_t b = rest[d];
        c = -1;
        if (!d) {  /* the root's children: a table instead of a scan of up to 256 siblings */
            c = t->root_child[b];
            if (c < 0) return -1;
            j = t->tok_start[c];
        } else {
        j = a;
        while (j < e && t->lens[j] == D - 1) j++;  /* tokens ending at the parent */
        while (j < e) {
            int32_t k = t->node_start[j] + (D - 1 - t->lcp[j]);
            uint8_t kb = t->node_byte[k];
            if (kb == b) { c = k; break; }
            if (kb > b) break;
            j = t->tok_end[k];
        }
        }
        if (c < 0) return -1;
        a = j;
        e = t->tok_end[c];
        ends = 0;
        while (j + ends < e && t->lens[j + ends] == D) {  /* tokens ending at this node */
            int64_t id = t->order[j + ends];
            if (id >> 5 < n_words) words[id >> 5] |= (uint32_t)1 << (id & 31);
            ends++;
        }
    }
    if (n_rest == 0 || n_rest >= t->max_len || e <= a + ends) return -1;
    return c;
}

static PyObject *py_literal(PyObject *self, PyObject *args) {
    PyObject *cap, *o_words;
    const char *rest;
    Py_ssize_t n_rest;
    if (!PyArg_ParseTuple(args, "Oy#O", &cap, &rest, &n_rest, &o_words)) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    Py_buffer bw;
    if (get_rw(o_words, &bw, 4, "words") < 0) return NULL;
    int32_t c = literal_core(t, (const uint8_t *)rest, n_rest, bw.buf, bw.len / 4);
    PyBuffer_Release(&bw);
    if (c < 0) Py_RETURN_NONE;
    return Py_BuildValue("(ni)", n_rest, t->node_m[c]);
}

static PyObject *bits_op(PyObject *args, int set) {
    PyObject *o_words, *o_ids;
    if (!PyArg_ParseTuple(args, "OO", &o_words, &o_ids)) return NULL;
    Py_buffer bw, bi;
    if (get_rw(o_words, &bw, 4, "words") < 0) return NULL;
    if (get_ro(o_ids, &bi, 8, "ids") < 0) { PyBuffer_Release(&bw); return NULL; }
    uint32_t *words = bw.buf;
    const int64_t *ids = bi.buf;
    Py_ssize_t n = bi.len / 8, nw = bw.len / 4;
    int bad = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t id = ids[j];
        if (id < 0 || (id >> 5) >= nw) { bad = 1; break; }
        if (set) words[id >> 5] |= (uint32_t)1 << (id & 31);
        else words[id >> 5] &= ~((uint32_t)1 << (id & 31));
    }
    PyBuffer_Release(&bw); PyBuffer_Release(&bi);
    if (bad) { PyErr_SetString(PyExc_ValueError, "ids must be token ids in [0, 32 * len(words))"); return NULL; }
    Py_RETURN_NONE;
}

static PyObject *py_set_bits(PyObject *self, PyObject *args) { return bits_op(args, 1); }

/* same_bytes(a, b) -> bool: two C-contiguous buffers hold the same bytes (a.tobytes() == b.tobytes()
 * without the copies; TokenIndex.share_walk_key compares tens of KiB of DFA tables with it) */
static PyObject *py_same_bytes(PyObject *self, PyObject *args) {
    PyObject *oa, *ob;
    if (!PyArg_ParseTuple(args, "OO", &oa, &ob)) return NULL;
    Py_buffer a, b;
    if (PyObject_GetBuffer(oa, &a, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(ob, &b, PyBUF_C_CONTIGUOUS) < 0) { PyBuffer_Release(&a); return NULL; }
    int same = a.len == b.len && (!a.len || !memcmp(a.buf, b.buf, a.len));
    PyBuffer_Release(&a); PyBuffer_Release(&b);
    return PyBool_FromLong(same);
}
static PyObject *py_clear_bits(PyObject *self, PyObject *args) { return bits_op(args, 0); }

/* or_into(out uint32[W], arrays sequence of uint32[W] buffers): out = the OR of every array, in
 * one pass per array (compute_mask's combination of a state's cached contributions) */
static PyObject *py_or_into(PyObject *self, PyObject *args) {
    PyObject *o_out, *o_arr;
    if (!PyArg_ParseTuple(args, "OO", &o_out, &o_arr)) return NULL;
    Py_buffer bo;
    if (get_rw(o_out, &bo, 4, "out") < 0) return NULL;
    PyObject *arr = PySequence_Fast(o_arr, "arrays must be a sequence");
    PyObject *ret = NULL;
    if (!arr) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(arr), nw = bo.len / 4;
    uint32_t *out = bo.buf;
    memset(out, 0, (size_t)nw * 4);
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_buffer b;
        if (get_ro(PySequence_Fast_GET_ITEM(arr, j), &b, 4, "arrays") < 0) goto done;
        if (b.len != bo.len) {
            PyBuffer_Release(&b);
            PyErr_Format(PyExc_ValueError, "arrays must have %zd items like out", nw);
            goto done;
        }
        const uint32_t *x = b.buf;
        for (Py_ssize_t k = 0; k < nw; k++) out[k] |= x[k];
        PyBuffer_Release(&b);
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    Py_XDECREF(arr);
    PyBuffer_Release(&bo);
    return ret;
}

/* fill_rows(bitmask int32[B, W], rows sequence of int, words sequence of uint32[W] buffers) */
static PyObject *py_fill_rows(PyObject *self, PyObject *args) {
    PyObject *o_bm, *o_rows, *o_words;
    if (!PyArg_ParseTuple(args, "OOO", &o_bm, &o_rows, &o_words)) return NULL;
    Py_buffer bm;
    if (get_rw(o_bm, &bm, 4, "bitmask") < 0) return NULL;
    PyObject *rows = PySequence_Fast(o_rows, "rows must be a sequence");
    PyObject *ws = rows ? PySequence_Fast(o_words, "words must be a sequence") : NULL;
    PyObject *ret = NULL;
    if (!ws) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    if (PySequence_Fast_GET_SIZE(ws) != n) { PyErr_SetString(PyExc_ValueError, "rows and words differ in length"); goto done; }
    Py_ssize_t nd = bm.ndim >= 1 ? bm.shape[bm.ndim - 1] : 0;
    Py_ssize_t nrows = nd ? bm.len / 4 / nd : 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t r = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(rows, j));
        if (r == -1 && PyErr_Occurred()) goto done;
        if (r < 0 || r >= nrows) { PyErr_Format(PyExc_ValueError, "row %zd out of range [0, %zd)", r, nrows); goto done; }
        Py_buffer b;
        if (get_ro(PySequence_Fast_GET_ITEM(ws, j), &b, 4, "words") < 0) goto done;
        if (b.len != nd * 4) {
            PyBuffer_Release(&b);
            PyErr_Format(PyExc_ValueError, "words must have %zd items", nd);
            goto done;
        }
        memcpy((char *)bm.buf + r * nd * 4, b.buf, nd * 4);
        PyBuffer_Release(&b);
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    Py_XDECREF(rows); Py_XDECREF(ws);
    PyBuffer_Release(&bm);
    return ret;
}

/* mask_logits(logits float32[B, V], bitmask int32[n, W], rows int64[n]): in place,
 * logits[rows[k], t] = -inf where bit t of bitmask[k] is 0 or t >= 32 W (apply_bitmask_ on CPU
 * float32 logits: one pass over the row, a word of 32 tokens at a time; all-ones words are skipped
 * and all-zero words are filled without looking at their bits) */
static PyObject *py_mask_logits(PyObject *self, PyObject *args) {
    PyObject *o_lg, *o_bm, *o_rows;
    if (!PyArg_ParseTuple(args, "OOO", &o_lg, &o_bm, &o_rows)) return NULL;
    Py_buffer lg, bm, br;
    if (get_rw(o_lg, &lg, 4, "logits") < 0) return NULL;
    if (get_ro(o_bm, &bm, 4, "bitmask") < 0) { PyBuffer_Release(&lg); return NULL; }
    if (get_ro(o_rows, &br, 8, "rows") < 0) { PyBuffer_Release(&lg); PyBuffer_Release(&bm); return NULL; }
    PyObject *ret = NULL;
    if (lg.ndim != 2 || bm.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "logits and bitmask must be 2-d");
        goto done;
    }
    Py_ssize_t nl = lg.shape[0], v = lg.shape[1], n = bm.shape[0], w = bm.shape[1];
    if (br.len / 8 != n) { PyErr_SetString(PyExc_ValueError, "rows must have one entry per bitmask row"); goto done; }
    const int64_t *rows = br.buf;
    for (Py_ssize_t k = 0; k < n; k++)
        if (rows[k] < 0 || rows[k] >= nl) { PyErr_Format(PyExc_ValueError, "row %lld out of range [0, %zd)", (long long)rows[k], nl); goto done; }
    const float ninf = -INFINITY;
    for (Py_ssize_t k = 0; k < n; k++) {
        float *row = (float *)lg.buf + rows[k] * v;
        const uint32_t *words = (const uint32_t *)bm.buf + k * w;
        Py_ssize_t full = v / 32 < w ? v / 32 : w;
        for (Py_ssize_t j = 0; j < full; j++) {
            uint32_t x = words[j];
            if (x == 0xFFFFFFFFu) continue;
            float *p = row + j * 32;
            if (x == 0) { for (int b = 0; b < 32; b++) p[b] = ninf; continue; }
            uint32_t off = ~x;
            while (off) { p[__builtin_ctz(off)] = ninf; off &= off - 1; }
        }
        for (Py_ssize_t t = full * 32; t < v; t++)
            if ((t >> 5) >= w || !((words[t >> 5] >> (t & 31)) & 1u)) row[t] = ninf;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyBuffer_Release(&lg); PyBuffer_Release(&bm); PyBuffer_Release(&br);
    return ret;
}

/* ---------------------------------------------------------------------------------------------
 * The Earley engine over integer state ids (rayml.decoding.earley.EarleyEngine with memo=True,
 * in C): byte-level Earley with Leo items and ZapFormat's dynamic pruning; every Earley set is
 * interned by its content and the set below it, so a set id identifies its whole (pruned) chart
 * and the results of steps, token accepts, exit charts and Leo tops are memoised per set id.
 * Items are (dotted rule d, DFA state st, origin o (SELF = -1: the set itself), Leo target ov);
 * the semantics (seeds, closure, Leo folding, pruning bound) are those of earley.py, which the
 * tests compare against bit for bit (masks and accepts). */

#define SELF (-1)
#define NO_SYM INT32_MIN

typedef struct { int32_t d, st, o, ov; } Item;

typedef struct {
    int32_t depth;           /* column of this set; chart[0..depth] */
    int32_t *chart;          /* set ids of the chart this set tops (chart[depth] = self) */
    Item *items;             /* the key: sorted items with a symbol after the dot */
    int32_t n_items;
    uint8_t accepting;
    int32_t max_ref;
    uint64_t hash;
    int32_t n_scan;          /* scan groups (t, s) -> items */
    int32_t *scan_t, *scan_s, *scan_off;
    Item *scan_items;
    int32_t n_wait;          /* wait groups, sorted by nonterminal */
    int32_t *wait_sym, *wait_off;
    Item *wait_items;
    uint8_t first_done;
    uint8_t first[256];
    int32_t *steps;          /* [256]: -2 unknown, -1 rejected, else set id */
    int32_t mslot1;          /* 1 + its slot in the state cache (Masks), 0: its mask is not cached */
} ESet;

typedef struct { int64_t k1, k2, v; } MapSlot;
typedef struct { MapSlot *slots; int64_t cap, n; } Map;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static int map_init(Map *m) {
    m->cap = 1024; m->n = 0;
    m->slots = malloc(sizeof(MapSlot) * m->cap);
    if (!m->slots) return -1;
    for (int64_t i = 0; i < m->cap; i++) m->slots[i].k1 = -1;
    return 0;
}

static int64_t *map_find(Map *m, int64_t k1, int64_t k2) {
    uint64_t h = mix64((uint64_t)k1 * 0x9E3779B97F4A7C15ULL ^ (uint64_t)k2);
    int64_t i = h & (m->cap - 1);
    while (m->slots[i].k1 != -1) {
        if (m->slots[i].k1 == k1 && m->slots[i].k2 == k2) return &m->slots[i].v;
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static int map_put(Map *m, int64_t k1, int64_t k2, int64_t v) {
    if (2 * (m->n + 1) > m->cap) {
        Map big = {malloc(sizeof(MapSlot) * m->cap * 2), m->cap * 2, 0};
        if (!big.slots) return -1;
        for (int64_t i = 0; i < big.cap; i++) big.slots[i].k1 = -1;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->slots[i].k1 != -1) map_put(&big, m->slots[i].k1, m->slots[i].k2, m->slots[i].v);
        free(m->slots);
        *m = big;
    }
    uint64_t h = mix64((uint64_t)k1 * 0x9E3779B97F4A7C15ULL ^ (uint64_t)k2);
    int64_t i = h & (m->cap - 1);
    while (m->slots[i].k1 != -1) {
        if (m->slots[i].k1 == k1 && m->slots[i].k2 == k2) { m->slots[i].v = v; return 0; }
        i = (i + 1) & (m->cap - 1);
    }
    m->slots[i].k1 = k1; m->slots[i].k2 = k2; m->slots[i].v = v;
    m->n++;
    return 0;
}

/* growable arrays of items / ints */
typedef struct { Item *a; int64_t n, cap; } ItemVec;
static int iv_push(ItemVec *v, Item it) {
    if (v->n == v->cap) {
        int64_t c = v->cap ? 2 * v->cap : 64;
        Item *a = realloc(v->a, sizeof(Item) * c);
        if (!a) return -1;
        v->a = a; v->cap = c;
    }
    v->a[v->n++] = it;
    return 0;
}

typedef struct Masks Masks;

typedef struct {
    PyObject_HEAD
    int32_t n_dots, n_nt, n_term, start;
    int32_t *d_next, *d_lhs;
    uint8_t *d_pen;
    int32_t *prods_off, *prods;
    uint8_t *nullable;
    int32_t **trans;         /* views of the terminals' tables (buffers held, not copied) */
    uint8_t **acc, **has_out;
    int32_t *n_states;
    Py_buffer *views;        /* 3 per terminal */
    int32_t n_views;
    Item start_item;
    int prune;
    ESet **sets;
    int32_t n_sets, cap_sets;
    int32_t *itab;           /* intern table of set ids (open addressing, -1 empty) */
    int64_t itab_cap;
    Map leo, tok, exits;
    Map sims;                /* (chart, trie node) -> offset in sim_pool of the memoised simulation */
    int64_t *sim_pool;       /* per memoised simulation: its length, then its token ids */
    int64_t sim_n, sim_cap;
    /* scratch of one closure */
    ItemVec work, found;
    ItemVec seeds;           /* the seeds of one step / exit (build reads them before anything else) */
    Item *hs;                /* hash set of the closure's items */
    uint32_t *hs_stamp;
    int64_t hs_cap;
    uint32_t stamp;
    uint32_t *pred_stamp;    /* per nonterminal: predicted in this closure */
    int64_t *done;           /* (c, m) pairs completed in this closure */
    int64_t n_done, cap_done;
    int64_t initial;
    int64_t n_built;
    Masks *m;                /* the mask tables (set_masks), NULL until set */
} Engine;

static void masks_free(Masks *m);
static int64_t masks_bytes(const Masks *m);

/* a set and its arrays are one allocation (build); only the step table is apart */
static void eset_free(ESet *s) {
    if (!s) return;
    free(s->steps);
    free(s);
}

static void engine_dealloc(Engine *e) {
    free(e->d_next); free(e->d_lhs); free(e->d_pen); free(e->prods_off); free(e->prods); free(e->nullable);
    if (e->views) for (int32_t v = 0; v < e->n_views; v++) PyBuffer_Release(&e->views[v]);
    free(e->views);
    free(e->trans); free(e->acc); free(e->has_out); free(e->n_states);
    if (e->sets) for (int32_t i = 0; i < e->n_sets; i++) eset_free(e->sets[i]);
    free(e->sets); free(e->itab);
    free(e->leo.slots); free(e->tok.slots); free(e->exits.slots); free(e->sims.slots); free(e->sim_pool);
    free(e->work.a); free(e->found.a); free(e->seeds.a); free(e->hs); free(e->hs_stamp); free(e->pred_stamp); free(e->done);
    masks_free(e->m);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int32_t *int_list(PyObject *seq, Py_ssize_t *n, const char *name) {
    PyObject *f = PySequence_Fast(seq, name);
    if (!f) return NULL;
    *n = PySequence_Fast_GET_SIZE(f);
    int32_t *out = malloc(sizeof(int32_t) * (*n + 1));
    if (!out) { Py_DECREF(f); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(f, i);
        if (x == Py_None) { out[i] = NO_SYM; continue; }
        long v = PyLong_AsLong(x);
        if (v == -1 && PyErr_Occurred()) { free(out); Py_DECREF(f); return NULL; }
        out[i] = (int32_t)v;
    }
    Py_DECREF(f);
    return out;
}

/* Engine(d_next, d_lhs, d_pen, prods_off, prods, nullable, terminals, start, start_dot, prune)
 * terminals: list of (trans int32 [S, 256], accept uint8 [S], has_out uint8 [S]) buffers */
static int engine_init(Engine *e, PyObject *args, PyObject *kw) {
    PyObject *o_next, *o_lhs, *o_pen, *o_poff, *o_prods, *o_null, *o_terms;
    int start, start_dot, prune;
    if (!PyArg_ParseTuple(args, "OOOOOOOiip", &o_next, &o_lhs, &o_pen, &o_poff, &o_prods, &o_null, &o_terms,
                          &start, &start_dot, &prune))
        return -1;
    Py_ssize_t n, n2, n3, npo, npr, nnul;
    e->d_next = int_list(o_next, &n, "d_next");
    if (!e->d_next) return -1;
    e->d_lhs = int_list(o_lhs, &n2, "d_lhs");
    if (!e->d_lhs) return -1;
    int32_t *pen = int_list(o_pen, &n3, "d_pen");
    if (!pen) return -1;
    e->n_dots = (int32_t)n;
    e->d_pen = malloc(n + 1);
    if (!e->d_pen) { free(pen); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n3 && i < n; i++) e->d_pen[i] = pen[i] != 0;
    free(pen);
    e->prods_off = int_list(o_poff, &npo, "prods_off");
    if (!e->prods_off) return -1;
    e->prods = int_list(o_prods, &npr, "prods");
    if (!e->prods) return -1;
    int32_t *nul = int_list(o_null, &nnul, "nullable");
    if (!nul) return -1;
    e->n_nt = (int32_t)nnul;
    e->nullable = malloc(nnul + 1);
    if (!e->nullable) { free(nul); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < nnul; i++) e->nullable[i] = nul[i] != 0;
    free(nul);
    if (n2 != n || n3 != n || npo != nnul + 1) {
        PyErr_SetString(PyExc_ValueError, "inconsistent grammar tables");
        return -1;
    }
    PyObject *terms = PySequence_Fast(o_terms, "terminals must be a sequence");
    if (!terms) return -1;
    e->n_term = (int32_t)PySequence_Fast_GET_SIZE(terms);
    e->trans = calloc(e->n_term + 1, sizeof(int32_t *));
    e->acc = calloc(e->n_term + 1, sizeof(uint8_t *));
    e->has_out = calloc(e->n_term + 1, sizeof(uint8_t *));
    e->n_states = calloc(e->n_term + 1, sizeof(int32_t));
    e->views = calloc(3 * (e->n_term + 1), sizeof(Py_buffer));
    if (!e->trans || !e->acc || !e->has_out || !e->n_states || !e->views) {
        Py_DECREF(terms); PyErr_NoMemory(); return -1;
    }
    for (int32_t t = 0; t < e->n_term; t++) {
        PyObject *tri = PySequence_Fast_GET_ITEM(terms, t);
        PyObject *a, *b, *c;
        if (!PyArg_ParseTuple(tri, "OOO", &a, &b, &c)) { Py_DECREF(terms); return -1; }
        Py_buffer *v = e->views + 3 * t;
        if (get_ro(b, &v[1], 1, "accept") < 0) { Py_DECREF(terms); return -1; }
        e->n_views = 3 * t + 2;
        if (get_ro(c, &v[2], 1, "has_out") < 0) { Py_DECREF(terms); return -1; }
        e->n_views = 3 * t + 3;
        if (get_ro(a, &v[0], 4, "trans") < 0) { Py_DECREF(terms); e->n_views = 3 * t + 3; return -1; }
        Py_ssize_t ns = v[1].len;
        if (v[2].len != ns || v[0].len != ns * 256 * 4) {
            Py_DECREF(terms);
            PyErr_SetString(PyExc_ValueError, "a terminal's trans must be int32 [S, 256] with accept and has_out [S]");
            return -1;
        }
        e->trans[t] = v[0].buf; e->acc[t] = v[1].buf; e->has_out[t] = v[2].buf;
        e->n_states[t] = (int32_t)ns;
    }
    Py_DECREF(terms);
    for (int32_t d = 0; d < e->n_dots; d++) {
        int32_t sym = e->d_next[d];
        if ((sym != NO_SYM && sym >= e->n_nt) || (sym != NO_SYM && sym < 0 && -sym - 1 >= e->n_term)
            || e->d_lhs[d] < 0 || e->d_lhs[d] >= e->n_nt) {
            PyErr_SetString(PyExc_ValueError, "grammar symbol out of range");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < npr; i++)
        if (e->prods[i] < 0 || e->prods[i] >= e->n_dots) { PyErr_SetString(PyExc_ValueError, "bad production"); return -1; }
    if (start < 0 || start >= e->n_nt || start_dot < 0 || start_dot >= e->n_dots) {
        PyErr_SetString(PyExc_ValueError, "bad start");
        return -1;
    }
    e->start = start;
    e->start_item = (Item){start_dot, 0, SELF, -1};
    e->prune = prune;
    e->cap_sets = 1024;
    e->sets = malloc(sizeof(ESet *) * e->cap_sets);
    e->itab_cap = 4096;
    e->itab = malloc(sizeof(int32_t) * e->itab_cap);
    e->hs_cap = 256;
    e->hs = malloc(sizeof(Item) * e->hs_cap);
    e->hs_stamp = calloc(e->hs_cap, sizeof(uint32_t));
    e->pred_stamp = calloc(e->n_nt + 1, sizeof(uint32_t));
    if (!e->sets || !e->itab || !e->hs || !e->hs_stamp || !e->pred_stamp || map_init(&e->leo) < 0
        || map_init(&e->tok) < 0 || map_init(&e->exits) < 0 || map_init(&e->sims) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t i = 0; i < e->itab_cap; i++) e->itab[i] = -1;
    e->initial = -2;
    return 0;
}

static inline uint64_t item_hash(Item it) {
    return mix64(((uint64_t)(uint32_t)it.d << 32 | (uint32_t)it.st) ^ mix64((uint64_t)(uint32_t)it.o << 32 | (uint32_t)it.ov));
}
static inline int item_eq(Item a, Item b) { return a.d == b.d && a.st == b.st && a.o == b.o && a.ov == b.ov; }
static int item_cmp(const void *x, const void *y) {
    const Item *a = x, *b = y;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    if (a->st != b->st) return a->st < b->st ? -1 : 1;
    if (a->o != b->o) return a->o < b->o ? -1 : 1;
    if (a->ov != b->ov) return a->ov < b->ov ? -1 : 1;
    return 0;
}

/* insert into the closure's hash set: 1 if new, 0 if present, -1 on error */
static int hs_add(Engine *e, Item it) {
    if (2 * (e->found.n + 1) > e->hs_cap) {  /* grow: re-insert the items found so far */
        int64_t cap = e->hs_cap * 2;
        Item *hs = malloc(sizeof(Item) * cap);
        uint32_t *st = calloc(cap, sizeof(uint32_t));
        if (!hs || !st) { free(hs); free(st); PyErr_NoMemory(); return -1; }
        free(e->hs); free(e->hs_stamp);
        e->hs = hs; e->hs_stamp = st; e->hs_cap = cap;
        for (int64_t j = 0; j < e->found.n; j++) {
            int64_t i = item_hash(e->found.a[j]) & (cap - 1);
            while (e->hs_stamp[i] == e->stamp) i = (i + 1) & (cap - 1);
            e->hs[i] = e->found.a[j];
            e->hs_stamp[i] = e->stamp;
        }
    }
    int64_t i = item_hash(it) & (e->hs_cap - 1);
    while (e->hs_stamp[i] == e->stamp) {
        if (item_eq(e->hs[i], it)) return 0;
        i = (i + 1) & (e->hs_cap - 1);
    }
    e->hs[i] = it;
    e->hs_stamp[i] = e->stamp;
    return 1;
}

static int hs_has(Engine *e, Item it) {
    int64_t i = item_hash(it) & (e->hs_cap - 1);
    while (e->hs_stamp[i] == e->stamp) {
        if (item_eq(e->hs[i], it)) return 1;
        i = (i + 1) & (e->hs_cap - 1);
    }
    return 0;
}

/* the items of set s waiting on nonterminal n (binary search over its wait groups) */
static const Item *wait_of(const ESet *s, int32_t n, int32_t *count) {
    int32_t lo = 0, hi = s->n_wait;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (s->wait_sym[mid] < n) lo = mid + 1; else hi = mid;
    }
    if (lo < s->n_wait && s->wait_sym[lo] == n) {
        *count = s->wait_off[lo + 1] - s->wait_off[lo];
        return s->wait_items + s->wait_off[lo];
    }
    *count = 0;
    return NULL;
}

#define LEO_NONE (-1)
/* leo_top(chart, m, n) of earley.py: returns the encoded top (nt << 32 | column) or LEO_NONE */
static int64_t leo_top(Engine *e, const int32_t *chart, int32_t m, int32_t n) {
    int64_t path_s[64], path_n[64];
    int np = 0;
    int64_t seen_n[64], seen_m[64];
    int ns = 0;
    int64_t res;
    while (1) {
        int cyc = 0;
        for (int k = 0; k < ns; k++) if (seen_n[k] == n && seen_m[k] == m) { cyc = 1; break; }
        if (cyc || ns >= 64 || np >= 64) { res = LEO_NONE; break; }  /* very long chains: not folded */
        seen_n[ns] = n; seen_m[ns] = m; ns++;
        int32_t sid = chart[m];
        ESet *s = e->sets[sid];
        int64_t *r = map_find(&e->leo, sid, n);
        if (r) {
            res = *r != LEO_NONE ? *r : (np ? ((int64_t)n << 32 | (uint32_t)m) : LEO_NONE);
            break;
        }
        int32_t cnt;
        const Item *w = wait_of(s, n, &cnt);
        if (cnt != 1 || !e->d_pen[w[0].d]) {
            if (map_put(&e->leo, sid, n, LEO_NONE) < 0) return -2;
            res = np ? ((int64_t)n << 32 | (uint32_t)m) : LEO_NONE;
            break;
        }
        path_s[np] = sid; path_n[np] = n; np++;
        n = w[0].ov >= 0 ? w[0].ov : e->d_lhs[w[0].d];
        m = w[0].o == SELF ? m : w[0].o;
    }
    for (int k = 0; k < np; k++)
        if (map_put(&e->leo, path_s[k], path_n[k], res) < 0) return -2;
    return res;
}

static uint64_t set_hash(int32_t base, const Item *items, int32_t n, int acc) {
    uint64_t h = mix64((uint64_t)(uint32_t)base * 31 + acc);
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ item_hash(items[i]));
    return h;
}

static int itab_insert(Engine *e, int32_t id);

/* the closure of seeds on top of chart[0..clen-1]: the new set's id, -1 (rejected), -2 (error) */
static int64_t build(Engine *e, const int32_t *chart, int32_t clen, const Item *seeds, int64_t n_seeds) {
    e->stamp++;
    if (e->stamp == 0) {  /* wrapped: clear the stamps */
        memset(e->hs_stamp, 0, sizeof(uint32_t) * e->hs_cap);
        memset(e->pred_stamp, 0, sizeof(uint32_t) * (e->n_nt + 1));
        e->stamp = 1;
    }
    e->n_built++;
    e->work.n = 0;
    e->found.n = 0;
    e->n_done = 0;
    int accepting = 0;
    for (int64_t i = 0; i < n_seeds; i++) if (iv_push(&e->work, seeds[i]) < 0) goto nomem;
    while (e->work.n) {
        Item it = e->work.a[--e->work.n];
        if (it.o != SELF && it.ov < 0) {
            int64_t top = leo_top(e, chart, it.o, e->d_lhs[it.d]);
            if (top == -2) goto nomem;
            if (top != LEO_NONE) { it.o = (int32_t)(top & 0xffffffff); it.ov = (int32_t)(top >> 32); }
        }
        if (hs_has(e, it)) continue;
        int32_t sym = e->d_next[it.d];
        if (sym == NO_SYM) {
            int32_t c = it.ov >= 0 ? it.ov : e->d_lhs[it.d];
            if (c == e->start) { accepting = 1; continue; }
            if (it.o == SELF) continue;
            int32_t m;
            int64_t top = leo_top(e, chart, it.o, c);
            if (top == -2) goto nomem;
            if (top != LEO_NONE) { c = (int32_t)(top >> 32); m = (int32_t)(top & 0xffffffff); }
            else m = it.o;
            if (c == e->start) { accepting = 1; continue; }
            int64_t key = (int64_t)c << 32 | (uint32_t)m, dup = 0;
            for (int64_t k = 0; k < e->n_done; k++) if (e->done[k] == key) { dup = 1; break; }
            if (dup) continue;
            if (e->n_done == e->cap_done) {
                int64_t cap = e->cap_done ? 2 * e->cap_done : 64;
                int64_t *dn = realloc(e->done, sizeof(int64_t) * cap);
                if (!dn) goto nomem;
                e->done = dn; e->cap_done = cap;
            }
            e->done[e->n_done++] = key;
            int32_t cnt;
            const Item *w = wait_of(e->sets[chart[m]], c, &cnt);
            for (int32_t k = 0; k < cnt; k++) {
                Item nx = {w[k].d + 1, 0, w[k].o == SELF ? m : w[k].o, w[k].ov};
                if (iv_push(&e->work, nx) < 0) goto nomem;
            }
            continue;
        }
        int r = hs_add(e, it);
        if (r < 0) return -2;
        if (iv_push(&e->found, it) < 0) goto nomem;
        if (sym >= 0) {
            if (e->pred_stamp[sym] != e->stamp) {
                e->pred_stamp[sym] = e->stamp;
                for (int32_t k = e->prods_off[sym]; k < e->prods_off[sym + 1]; k++) {
                    Item nx = {e->prods[k], 0, SELF, -1};
                    if (iv_push(&e->work, nx) < 0) goto nomem;
                }
            }
            if (e->nullable[sym]) {
                Item nx = {it.d + 1, 0, it.o, it.ov};
                if (iv_push(&e->work, nx) < 0) goto nomem;
            }
        }
    }
    int has_scan = 0;
    for (int64_t i = 0; i < e->found.n; i++) if (e->d_next[e->found.a[i].d] < 0) { has_scan = 1; break; }
    if (!has_scan && !accepting) return -1;
    int32_t n_items = (int32_t)e->found.n;
    qsort(e->found.a, n_items, sizeof(Item), item_cmp);
    int32_t max_ref = -1;
    for (int32_t i = 0; i < n_items; i++) if (e->found.a[i].o != SELF && e->found.a[i].o > max_ref) max_ref = e->found.a[i].o;
    int32_t keep = (e->prune && clen) ? max_ref + 1 : clen;
    int32_t base = keep ? chart[keep - 1] : -1;
    uint64_t h = set_hash(base, e->found.a, n_items, accepting);
    int64_t i = h & (e->itab_cap - 1);
    while (e->itab[i] != -1) {
        ESet *s = e->sets[e->itab[i]];
        if (s->hash == h && s->n_items == n_items && s->accepting == accepting
            && (s->depth ? s->chart[s->depth - 1] : -1) == base
            && !memcmp(s->items, e->found.a, sizeof(Item) * n_items))
            return e->itab[i];
        i = (i + 1) & (e->itab_cap - 1);
    }
    /* a new set: the set, its items, scan and wait groups and chart in one allocation */
    int32_t n_sc = 0, n_wt = 0;
    for (int32_t k = 0; k < n_items; k++) { if (e->d_next[e->found.a[k].d] < 0) n_sc++; else n_wt++; }
    size_t sz = sizeof(ESet) + sizeof(Item) * ((size_t)n_items + n_sc + n_wt + 3)
                + sizeof(int32_t) * ((size_t)keep + 1 + 3 * ((size_t)n_sc + 1) + 1 + 2 * ((size_t)n_wt + 1) + 1);
    ESet *s = malloc(sz);
    if (!s) goto nomem;
    memset(s, 0, sizeof(ESet));
    Item *ip = (Item *)(s + 1);  /* Item is 4 int32: the int32 arrays after the items stay aligned */
    s->items = ip; ip += n_items + 1;
    Item *sc = ip; ip += n_sc + 1;
    Item *wt = ip; ip += n_wt + 1;
    int32_t *qp = (int32_t *)ip;
    s->chart = qp; qp += keep + 1;
    s->scan_t = qp; qp += n_sc + 1;
    s->scan_s = qp; qp += n_sc + 1;
    s->scan_off = qp; qp += n_sc + 2;
    s->wait_sym = qp; qp += n_wt + 1;
    s->wait_off = qp;
    s->depth = keep;
    if (keep) memcpy(s->chart, chart, sizeof(int32_t) * keep);
    memcpy(s->items, e->found.a, sizeof(Item) * n_items);
    s->n_items = n_items;
    s->accepting = (uint8_t)accepting;
    s->max_ref = max_ref;
    s->hash = h;
    /* scan groups: items on a terminal, grouped by (t, st); wait groups by nonterminal (the sort keys
     * in a stack buffer for the usual few tens of items) */
    int64_t kbuf[256];
    int64_t *sk = n_sc + n_wt + 2 <= 256 ? kbuf : malloc(sizeof(int64_t) * (n_sc + n_wt + 2));
    if (!sk) { eset_free(s); goto nomem; }
    int64_t *wk = sk + n_sc + 1;
    int32_t a = 0, b = 0;
    for (int32_t k = 0; k < n_items; k++) {
        int32_t sym = e->d_next[s->items[k].d];
        if (sym < 0) { sc[a] = s->items[k]; sk[a] = ((int64_t)(-sym - 1) << 32 | (uint32_t)s->items[k].st); a++; }
        else { wt[b] = s->items[k]; wk[b] = sym; b++; }
    }
    /* insertion sort by key (sets hold tens of items) */
    for (int32_t x = 1; x < n_sc; x++) {
        Item ti = sc[x]; int64_t tk = sk[x]; int32_t y = x - 1;
        while (y >= 0 && sk[y] > tk) { sc[y + 1] = sc[y]; sk[y + 1] = sk[y]; y--; }
        sc[y + 1] = ti; sk[y + 1] = tk;
    }
    for (int32_t x = 1; x < n_wt; x++) {
        Item ti = wt[x]; int64_t tk = wk[x]; int32_t y = x - 1;
        while (y >= 0 && wk[y] > tk) { wt[y + 1] = wt[y]; wk[y + 1] = wk[y]; y--; }
        wt[y + 1] = ti; wk[y + 1] = tk;
    }
    for (int32_t x = 0; x < n_sc; x++) {
        if (!x || sk[x] != sk[x - 1]) {
            s->scan_t[s->n_scan] = (int32_t)(sk[x] >> 32);
            s->scan_s[s->n_scan] = (int32_t)(sk[x] & 0xffffffff);
            s->scan_off[s->n_scan] = x;
            s->n_scan++;
        }
    }
    s->scan_off[s->n_scan] = n_sc;
    for (int32_t x = 0; x < n_wt; x++) {
        if (!x || wk[x] != wk[x - 1]) {
            s->wait_sym[s->n_wait] = (int32_t)wk[x];
            s->wait_off[s->n_wait] = x;
            s->n_wait++;
        }
    }
    s->wait_off[s->n_wait] = n_wt;
    s->scan_items = sc;
    s->wait_items = wt;
    if (sk != kbuf) free(sk);
    if (e->n_sets == e->cap_sets) {
        ESet **ns = realloc(e->sets, sizeof(ESet *) * e->cap_sets * 2);
        if (!ns) { eset_free(s); goto nomem; }
        e->sets = ns; e->cap_sets *= 2;
    }
    int32_t id = e->n_sets++;
    e->sets[id] = s;
    s->chart[keep] = id;
    if (itab_insert(e, id) < 0) return -2;
    return id;
nomem:
    PyErr_NoMemory();
    return -2;
}

static int itab_insert(Engine *e, int32_t id) {
    if (2 * (int64_t)e->n_sets > e->itab_cap) {
        int64_t cap = e->itab_cap * 2;
        int32_t *t = malloc(sizeof(int32_t) * cap);
        if (!t) { PyErr_NoMemory(); return -1; }
        for (int64_t i = 0; i < cap; i++) t[i] = -1;
        for (int32_t k = 0; k < e->n_sets; k++) {
            if (k == id) continue;
            int64_t i = e->sets[k]->hash & (cap - 1);
            while (t[i] != -1) i = (i + 1) & (cap - 1);
            t[i] = k;
        }
        free(e->itab);
        e->itab = t; e->itab_cap = cap;
    }
    int64_t i = e->sets[id]->hash & (e->itab_cap - 1);
    while (e->itab[i] != -1) i = (i + 1) & (e->itab_cap - 1);
    e->itab[i] = id;
    return 0;
}

/* the seeds of scan group g of set s whose DFA reached state a (_step / exit_chart of earley.py):
 * each item stays in state a if a has transitions, and advances its dot if a accepts */
static int group_seeds(Engine *e, const ESet *s, int32_t g, int32_t a, ItemVec *seeds) {
    int32_t t = s->scan_t[g], j = s->depth;
    int mid = e->has_out[t][a], ok = e->acc[t][a];
    for (int32_t k = s->scan_off[g]; k < s->scan_off[g + 1]; k++) {
        Item it = s->scan_items[k];
        int32_t oo = it.o == SELF ? j : it.o;
        if (mid && iv_push(seeds, (Item){it.d, a, oo, it.ov}) < 0) return -1;
        if (ok && iv_push(seeds, (Item){it.d + 1, 0, oo, it.ov}) < 0) return -1;
    }
    return 0;
}

/* one byte from set id c (memoised on the set): new id, -1 rejected, -2 error */
static int64_t step(Engine *e, int32_t c, int b) {
    ESet *s = e->sets[c];
    if (s->steps && s->steps[b] != -2) return s->steps[b];
    if (!s->steps) {
        s->steps = malloc(sizeof(int32_t) * 256);
        if (!s->steps) { PyErr_NoMemory(); return -2; }
        for (int k = 0; k < 256; k++) s->steps[k] = -2;
    }
    ItemVec *seeds = &e->seeds;  /* the engine's scratch (build copies the seeds before anything else) */
    seeds->n = 0;
    for (int32_t g = 0; g < s->n_scan; g++) {
        int32_t s2 = e->trans[s->scan_t[g]][(int64_t)s->scan_s[g] * 256 + b];
        if (s2 >= 0 && group_seeds(e, s, g, s2, seeds) < 0) { PyErr_NoMemory(); return -2; }
    }
    int64_t r = -1;
    if (seeds->n) r = build(e, s->chart, s->depth + 1, seeds->a, seeds->n);
    if (r == -2) return -2;
    e->sets[c]->steps[b] = (int32_t)r;  /* e->sets may have moved: re-read */
    return r;
}

static const uint8_t *first_bytes(Engine *e, int32_t c) {
    ESet *s = e->sets[c];
    if (!s->first_done) {
        memset(s->first, 0, 256);
        for (int32_t g = 0; g < s->n_scan; g++) {
            const int32_t *row = e->trans[s->scan_t[g]] + (int64_t)s->scan_s[g] * 256;
            for (int b = 0; b < 256; b++) s->first[b] |= (uint8_t)(row[b] >= 0);  /* branch-free: vectorized */
        }
        s->first_done = 1;
    }
    return s->first;
}

static int check_id(Engine *e, long long c) {
    if (c < 0 || c >= e->n_sets) { PyErr_Format(PyExc_ValueError, "state id %lld out of range", c); return -1; }
    return 0;
}

static PyObject *res_obj(int64_t r) {
    if (r == -2) return NULL;
    return PyLong_FromLongLong(r);
}

static PyObject *eng_initial(Engine *e, PyObject *noargs) {
    if (e->initial == -2) {
        int64_t r = build(e, NULL, 0, &e->start_item, 1);
        if (r == -2) return NULL;
        e->initial = r;
    }
    return PyLong_FromLongLong(e->initial);
}

static PyObject *eng_step(Engine *e, PyObject *args) {
    long long c; int b;
    if (!PyArg_ParseTuple(args, "Li", &c, &b)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    if (b < 0 || b > 255) { PyErr_SetString(PyExc_ValueError, "byte must be in [0, 256)"); return NULL; }
    return res_obj(step(e, (int32_t)c, b));
}

/* accept_bytes' one-set path (earley.py _accept_inside): when the chart waits on one terminal
 * state and every byte but the last keeps that DFA alive in a state that neither accepts nor is
 * final, no item completes before the last byte, so the pruned chart after the bytes is the one
 * built from the items advanced to the DFA's last state: one closure instead of one per byte.
 * Returns -3 when the path does not apply (then bytes are stepped one by one). */
static int64_t accept_inside(Engine *e, int32_t c, const uint8_t *data, Py_ssize_t n) {
    ESet *s = e->sets[c];
    if (!e->prune || n < 2 || s->n_scan != 1 || (s->steps && s->steps[data[0]] != -2)) return -3;
    int32_t t = s->scan_t[0], st = s->scan_s[0];
    const int32_t *trans = e->trans[t];
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        st = trans[(int64_t)st * 256 + data[i]];
        if (st < 0) return -1;
        if (e->acc[t][st] || !e->has_out[t][st]) return -3;
    }
    int32_t s2 = trans[(int64_t)st * 256 + data[n - 1]];
    if (s2 < 0) return -1;
    ItemVec *seeds = &e->seeds;
    seeds->n = 0;
    if (group_seeds(e, s, 0, s2, seeds) < 0) { PyErr_NoMemory(); return -2; }
    int64_t r = -1;
    if (seeds->n) r = build(e, s->chart, s->depth + 1, seeds->a, seeds->n);
    return r;
}

static int64_t accept_data(Engine *e, int32_t c, const uint8_t *data, Py_ssize_t n) {
    int64_t r = accept_inside(e, c, data, n);
    if (r != -3) return r;
    r = c;
    for (Py_ssize_t i = 0; i < n && r >= 0; i++) r = step(e, (int32_t)r, data[i]);
    return r;
}

static PyObject *eng_accept_bytes(Engine *e, PyObject *args) {
    long long c; const char *data; Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Ly#", &c, &data, &n)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    return res_obj(accept_data(e, (int32_t)c, (const uint8_t *)data, n));
}

/* accept_token(c, token, data): memoised per (set, token) */
static PyObject *eng_accept_token(Engine *e, PyObject *args) {
    long long c, tok; const char *data; Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "LLy#", &c, &tok, &data, &n)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    int64_t *hit = map_find(&e->tok, c, tok);
    if (hit) return PyLong_FromLongLong(*hit);
    int64_t r = accept_data(e, (int32_t)c, (const uint8_t *)data, n);
    if (r == -2) return NULL;
    if (map_put(&e->tok, c, tok, r) < 0) return PyErr_NoMemory();
    return PyLong_FromLongLong(r);
}

/* exit_chart(c, t, s, a): the chart after the items on (t, s) reached DFA state a and nothing else */
static int64_t exit_chart(Engine *e, int32_t c, int32_t t, int32_t st, int32_t a) {
    ESet *s = e->sets[c];
    int32_t g = -1;
    for (int32_t k = 0; k < s->n_scan; k++) if (s->scan_t[k] == t && s->scan_s[k] == st) { g = k; break; }
    if (g < 0) return -1;
    if (t < 0 || t >= e->n_term || a < 0 || a >= e->n_states[t]) { PyErr_SetString(PyExc_ValueError, "bad DFA state"); return -2; }
    int64_t *hit = map_find(&e->exits, c, ((int64_t)g << 32) | (uint32_t)a);
    if (hit) return *hit;
    ItemVec *seeds = &e->seeds;
    seeds->n = 0;
    if (group_seeds(e, s, g, a, seeds) < 0) { PyErr_NoMemory(); return -2; }
    int64_t r = -1;
    if (seeds->n) r = build(e, s->chart, s->depth + 1, seeds->a, seeds->n);
    if (r == -2) return -2;
    if (map_put(&e->exits, c, ((int64_t)g << 32) | (uint32_t)a, r) < 0) { PyErr_NoMemory(); return -2; }
    return r;
}

static PyObject *eng_exit_chart(Engine *e, PyObject *args) {
    long long c; int t, st, a;
    if (!PyArg_ParseTuple(args, "Liii", &c, &t, &st, &a)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    return res_obj(exit_chart(e, (int32_t)c, t, st, a));
}

static PyObject *eng_scan_keys(Engine *e, PyObject *args) {
    long long c;
    if (!PyArg_ParseTuple(args, "L", &c)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    ESet *s = e->sets[c];
    PyObject *out = PyList_New(s->n_scan);
    if (!out) return NULL;
    for (int32_t g = 0; g < s->n_scan; g++) {
        PyObject *x = Py_BuildValue("(ii)", s->scan_t[g], s->scan_s[g]);
        if (!x) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, g, x);
    }
    return out;
}

static PyObject *eng_accepting(Engine *e, PyObject *args) {
    long long c;
    if (!PyArg_ParseTuple(args, "L", &c)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    return PyBool_FromLong(e->sets[c]->accepting);
}

static PyObject *eng_first(Engine *e, PyObject *args) {
    long long c;
    if (!PyArg_ParseTuple(args, "L", &c)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    return PyBytes_FromStringAndSize((const char *)first_bytes(e, (int32_t)c), 256);
}

/* (live items, depth) of the chart topped by c */
static PyObject *eng_shape(Engine *e, PyObject *args) {
    long long c;
    if (!PyArg_ParseTuple(args, "L", &c)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    ESet *s = e->sets[c];
    long long items = 0;
    for (int32_t k = 0; k <= s->depth; k++) items += e->sets[s->chart[k]]->n_items;
    return Py_BuildValue("(Li)", items, s->depth + 1);
}

/* chart_key(c): per column (frozenset of items, accepting), as earley.EarleyEngine.chart_key */
static PyObject *eng_chart_key(Engine *e, PyObject *args) {
    long long c;
    if (!PyArg_ParseTuple(args, "L", &c)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    ESet *s = e->sets[c];
    PyObject *out = PyTuple_New(s->depth + 1);
    if (!out) return NULL;
    for (int32_t k = 0; k <= s->depth; k++) {
        ESet *x = e->sets[s->chart[k]];
        PyObject *lst = PyList_New(x->n_items);
        if (!lst) { Py_DECREF(out); return NULL; }
        for (int32_t i = 0; i < x->n_items; i++) {
            Item it = x->items[i];
            PyList_SET_ITEM(lst, i, Py_BuildValue("(iiii)", it.d, it.st, it.o, it.ov));
        }
        PyObject *fs = PyFrozenSet_New(lst);
        Py_DECREF(lst);
        if (!fs) { Py_DECREF(out); return NULL; }
        PyObject *pair = Py_BuildValue("(NO)", fs, x->accepting ? Py_True : Py_False);
        if (!pair) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, k, pair);
    }
    return out;
}

/* simulate(c, trie, g) -> (bytes stepped, int64 token ids): the tokens under preorder trie node g
 * (depth p) whose bytes after the first p are accepted from set c: a depth-first walk of the trie
 * that steps the chart once per node, only into children whose byte the chart allows (a rejected
 * prefix drops its subtree: the rejected-prefix cache). */
/* append v to the growable int64 array (*a, *n, *cap); -1 when out of memory */
static int i64_push(int64_t **a, int64_t *n, int64_t *cap, int64_t v) {
    if (*n == *cap) {
        int64_t c = *cap ? 2 * *cap : 256;
        int64_t *na = realloc(*a, sizeof(int64_t) * c);
        if (!na) return -1;
        *a = na; *cap = c;
    }
    (*a)[(*n)++] = v;
    return 0;
}

/* the trie walk below node g0 from chart c (CompiledGrammar._simulate): the token ids found are
 * appended to (*ids, *n_ids, *cap_ids), the bytes stepped added to *n_sim; -1 with an exception set */
static int sim_run(Engine *e, Trie *t, int64_t c, int32_t g0, int64_t **ids, int64_t *n_ids, int64_t *cap_ids,
                   int64_t *n_sim) {
    int64_t cap_st = 256, top = 0;
    int64_t local[2 * 256];  /* the walk's stack: on the C stack until it outgrows it (no malloc per walk) */
    int64_t *stk = local;
    int rc = -1;
    stk[0] = c; stk[1] = g0; top = 1;
    while (top) {
        top--;
        int32_t cs = (int32_t)stk[2 * top], g = (int32_t)stk[2 * top + 1];
        int32_t d = t->node_depth[g];
        if (d >= t->max_len) continue;
        Py_ssize_t j = t->tok_start[g], e_ = t->tok_end[g];
        while (j < e_ && t->lens[j] == d) j++;
        const uint8_t *fb = first_bytes(e, cs);
        while (j < e_) {
            int32_t ch = t->node_start[j] + (d - t->lcp[j]);
            Py_ssize_t next = t->tok_end[ch];
            if (fb[t->node_byte[ch]]) {
                int64_t c2 = step(e, cs, t->node_byte[ch]);
                (*n_sim)++;
                if (c2 == -2) goto done;
                if (c2 >= 0) {
                    for (Py_ssize_t k = j; k < next && t->lens[k] == d + 1; k++)
                        if (i64_push(ids, n_ids, cap_ids, t->order[k]) < 0) { PyErr_NoMemory(); goto done; }
                    if (top == cap_st) {
                        int64_t *ns = stk == local ? malloc(sizeof(int64_t) * 4 * cap_st)
                                                   : realloc(stk, sizeof(int64_t) * 4 * cap_st);
                        if (!ns) { PyErr_NoMemory(); goto done; }
                        if (stk == local) memcpy(ns, local, sizeof(local));
                        stk = ns; cap_st *= 2;
                    }
                    stk[2 * top] = c2; stk[2 * top + 1] = ch; top++;
                }
            }
            j = next;
        }
    }
    rc = 0;
done:
    if (stk != local) free(stk);
    return rc;
}

static PyObject *eng_simulate(Engine *e, PyObject *args) {
    long long c; PyObject *cap; int g0;
    if (!PyArg_ParseTuple(args, "LOi", &c, &cap, &g0)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    if (g0 < 0 || g0 >= t->n_nodes) { PyErr_SetString(PyExc_ValueError, "trie node out of range"); return NULL; }
    int64_t n_sim = 0, n_ids = 0, cap_ids = 0, *ids = NULL;
    PyObject *ret = NULL;
    if (sim_run(e, t, c, g0, &ids, &n_ids, &cap_ids, &n_sim) == 0)
        ret = Py_BuildValue("(Ly#)", (long long)n_sim, ids ? (char *)ids : "", (Py_ssize_t)(n_ids * 8));
    free(ids);
    return ret;
}

/* exits_into(c, trie, nodes int64[k] preorder ids, words uint32[W]) -> bytes stepped: the tokens
 * under each node accepted from chart c (simulate), OR-ed into words; each (c, node) walk is
 * memoised in the engine (the Python engine's exit cache, unbounded here like the other memos) */
/* the walk below trie node g from chart c, memoised per (c, g) in the engine, OR-ed into words:
 * 0, or -1 with an exception set */
static int sim_or(Engine *e, Trie *t, int32_t c, int64_t g, uint32_t *words, Py_ssize_t nw, int64_t *n_sim) {
    if (g < 0 || g >= t->n_nodes) { PyErr_SetString(PyExc_ValueError, "trie node out of range"); return -1; }
    int64_t *hit = map_find(&e->sims, c, g), off;
    if (hit) off = *hit;
    else {
        off = e->sim_n;
        if (i64_push(&e->sim_pool, &e->sim_n, &e->sim_cap, 0) < 0) { PyErr_NoMemory(); return -1; }
        if (sim_run(e, t, c, (int32_t)g, &e->sim_pool, &e->sim_n, &e->sim_cap, n_sim) < 0) {
            e->sim_n = off;
            return -1;
        }
        e->sim_pool[off] = e->sim_n - off - 1;
        if (map_put(&e->sims, c, g, off) < 0) { PyErr_NoMemory(); return -1; }
    }
    const int64_t *ids = e->sim_pool + off + 1;
    for (int64_t j = 0, n = e->sim_pool[off]; j < n; j++)
        if ((ids[j] >> 5) < nw) words[ids[j] >> 5] |= (uint32_t)1 << (ids[j] & 31);
    return 0;
}

static PyObject *eng_exits_into(Engine *e, PyObject *args) {
    long long c; PyObject *cap, *o_nodes, *o_words;
    if (!PyArg_ParseTuple(args, "LOOO", &c, &cap, &o_nodes, &o_words)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    Py_buffer bn, bw;
    if (get_ro(o_nodes, &bn, 8, "nodes") < 0) return NULL;
    if (get_rw(o_words, &bw, 4, "words") < 0) { PyBuffer_Release(&bn); return NULL; }
    const int64_t *nodes = bn.buf;
    Py_ssize_t k = bn.len / 8;
    int64_t n_sim = 0;
    PyObject *ret = NULL;
    for (Py_ssize_t q = 0; q < k; q++)
        if (sim_or(e, t, (int32_t)c, nodes[q], bw.buf, bw.len / 4, &n_sim) < 0) goto done;
    ret = PyLong_FromLongLong((long long)n_sim);
done:
    PyBuffer_Release(&bn); PyBuffer_Release(&bw);
    return ret;
}

/* stats(): interned sets, closures built, and the bytes the engine holds (sets, tables, memos) */
static PyObject *eng_stats(Engine *e, PyObject *noargs) {
    long long bytes = sizeof(Engine) + sizeof(ESet *) * (long long)e->cap_sets + 4LL * e->itab_cap
                      + (long long)sizeof(MapSlot) * (e->leo.cap + e->tok.cap + e->exits.cap + e->sims.cap)
                      + 8LL * e->sim_cap
                      + (long long)sizeof(Item) * (e->work.cap + e->found.cap + e->hs_cap) + 4LL * e->hs_cap
                      + masks_bytes(e->m);
    for (int32_t i = 0; i < e->n_sets; i++) {
        ESet *s = e->sets[i];
        bytes += sizeof(ESet) + 4LL * (s->depth + 1) + 2LL * sizeof(Item) * s->n_items
                 + 12LL * (s->n_scan + 1) + 8LL * (s->n_wait + 1) + (s->steps ? 1024 : 0);
    }
    return Py_BuildValue("{s:i,s:L,s:L}", "sets", e->n_sets, "closures", (long long)e->n_built, "bytes", bytes);
}

static PyObject *eng_set_masks(Engine *e, PyObject *args);
static PyObject *eng_mask_into(Engine *e, PyObject *args);
static PyObject *eng_fill_row(Engine *e, PyObject *args);
static PyObject *eng_mask_copy(Engine *e, PyObject *args);
static PyObject *eng_mask_stats(Engine *e, PyObject *noargs);

static PyMethodDef eng_methods[] = {
    {"initial", (PyCFunction)eng_initial, METH_NOARGS, "The id of the chart before any byte."},
    {"step", (PyCFunction)eng_step, METH_VARARGS, "step(id, byte) -> id or -1."},
    {"accept_bytes", (PyCFunction)eng_accept_bytes, METH_VARARGS, "accept_bytes(id, data) -> id or -1."},
    {"accept_token", (PyCFunction)eng_accept_token, METH_VARARGS, "accept_token(id, token, data), memoised."},
    {"exit_chart", (PyCFunction)eng_exit_chart, METH_VARARGS, "exit_chart(id, t, s, a) -> id or -1."},
    {"scan_keys", (PyCFunction)eng_scan_keys, METH_VARARGS, "The (terminal, DFA state) pairs waited on."},
    {"accepting", (PyCFunction)eng_accepting, METH_VARARGS, "The text so far is a sentence."},
    {"first", (PyCFunction)eng_first, METH_VARARGS, "bytes[256]: 1 where the next byte may be."},
    {"shape", (PyCFunction)eng_shape, METH_VARARGS, "(live items, Earley sets) of the chart."},
    {"chart_key", (PyCFunction)eng_chart_key, METH_VARARGS, "The chart's content, column by column."},
    {"simulate", (PyCFunction)eng_simulate, METH_VARARGS, "simulate(id, trie, node) -> (bytes stepped, ids)."},
    {"exits_into", (PyCFunction)eng_exits_into, METH_VARARGS, "exits_into(id, trie, nodes, words) -> bytes stepped (memoised)."},
    {"stats", (PyCFunction)eng_stats, METH_NOARGS, "Interned sets and closures built."},
    {"set_masks", (PyCFunction)eng_set_masks, METH_VARARGS, "set_masks(trie, eos_words, counters, cache_size)."},
    {"mask_into", (PyCFunction)eng_mask_into, METH_VARARGS, "mask_into(id, words, base_of) -> bytes stepped."},
    {"fill_row", (PyCFunction)eng_fill_row, METH_VARARGS, "fill_row(id, bitmask, row, base_of) -> True or None."},
    {"mask_copy", (PyCFunction)eng_mask_copy, METH_VARARGS, "mask_copy(id, words, base_of): the cached mask."},
    {"mask_stats", (PyCFunction)eng_mask_stats, METH_NOARGS, "(state-cache hits, misses, bytes stepped)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rayml.decoding._zapcore.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ZapFormat's Earley engine over integer state ids (see earley.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = eng_methods,
};

/* ---- the per-state setup of a first visit (matcher.CompiledGrammar.terminal_info), issue 44 ----
 *   horizon_classes(trans int32[S, 256], accept uint8[S], rounds, out int64[S]) -> classes: the Moore
 *       partition refinement of CompiledGrammar.horizon_classes (byte classes of identical columns,
 *       then at most `rounds` rounds, stopping when a round splits no class); class ids are in order
 *       of first appearance (the Python engine's are in sorted-row order: the same partition)
 *   literal_rest(trans, accept, s) -> (rest bytes, a) or None: matcher._literal_rest
 *   count_cut(in_ids, in_key, all_words, close_n, close_ends, close_end_at, need, room, out) -> (a, b):
 *       matcher._CountBase._compute's bits into out; a, b the slice of its closing-quote nodes */

static uint64_t hmix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

/* one representative byte per set of bytes with identical transition columns (regex.byte_class_columns) */
static int byte_reps(const int32_t *trans, Py_ssize_t S, int *reps) {
    uint64_t hc[256];
    int k = 0;
    for (int b = 0; b < 256; b++) {
        uint64_t h = 1469598103934665603ULL;
        for (Py_ssize_t s = 0; s < S; s++) h = hmix(h, (uint64_t)(uint32_t)trans[s * 256 + b]);
        hc[b] = h;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) {
            int r = reps[j];
            if (hc[r] != h) continue;
            Py_ssize_t s = 0;
            while (s < S && trans[s * 256 + b] == trans[s * 256 + r]) s++;
            dup = s == S;
        }
        if (!dup) reps[k++] = b;
    }
    return k;
}

/* CompiledGrammar.horizon_classes into cls[S]: 0, or -1 (out of memory, an exception set) */
static int hclasses_core(const int32_t *trans, const uint8_t *acc, Py_ssize_t S, int rounds, int64_t *cls) {
    int reps[256];
    int k = byte_reps(trans, S, reps);
    Py_ssize_t cap = 16;
    while (cap < 2 * S) cap <<= 1;
    int64_t *nw = malloc((S ? S : 1) * sizeof(int64_t));
    Py_ssize_t *table = malloc(cap * sizeof(Py_ssize_t));
    uint64_t *hs = malloc((S ? S : 1) * sizeof(uint64_t));
    if (!nw || !table || !hs) { free(nw); free(table); free(hs); PyErr_NoMemory(); return -1; }
    int seen[2] = {0, 0};
    for (Py_ssize_t s = 0; s < S; s++) { cls[s] = acc[s] ? 1 : 0; seen[cls[s]] = 1; }
    Py_ssize_t n_cls = seen[0] + seen[1];
    for (int r = 0; r < rounds; r++) {
        for (Py_ssize_t j = 0; j < cap; j++) table[j] = -1;
        Py_ssize_t n_new = 0;
        for (Py_ssize_t s = 0; s < S; s++) {
            const int32_t *row = trans + s * 256;
            uint64_t h = hmix(7, (uint64_t)cls[s]);
            for (int j = 0; j < k; j++) {
                int32_t x = row[reps[j]];
                h = hmix(h, x < 0 ? (uint64_t)-1 : (uint64_t)cls[x]);
            }
            hs[s] = h;
            Py_ssize_t pos = (Py_ssize_t)(h & (uint64_t)(cap - 1));
            for (;;) {
                Py_ssize_t q = table[pos];
                if (q < 0) { table[pos] = s; nw[s] = n_new++; break; }
                if (hs[q] == h && cls[q] == cls[s]) {
                    const int32_t *rq = trans + q * 256;
                    int j = 0;
                    for (; j < k; j++) {
                        int32_t x = row[reps[j]], y = rq[reps[j]];
                        if ((x < 0 ? -1 : cls[x]) != (y < 0 ? -1 : cls[y])) break;
                    }
                    if (j == k) { nw[s] = nw[q]; break; }
                }
                pos = (pos + 1) & (cap - 1);
            }
        }
        memcpy(cls, nw, S * sizeof(int64_t));
        if (n_new == n_cls) break;  /* no class split: the partition is stable */
        n_cls = n_new;
    }
    free(nw); free(table); free(hs);
    return 0;
}

static PyObject *py_horizon_classes(PyObject *self, PyObject *args) {
    PyObject *o_trans, *o_acc, *o_out;
    int rounds;
    if (!PyArg_ParseTuple(args, "OOiO", &o_trans, &o_acc, &rounds, &o_out)) return NULL;
    Py_buffer bt, ba, bo;
    if (get_ro(o_trans, &bt, 4, "trans") < 0) return NULL;
    if (get_ro(o_acc, &ba, 1, "accept") < 0) { PyBuffer_Release(&bt); return NULL; }
    if (get_rw(o_out, &bo, 8, "out") < 0) { PyBuffer_Release(&bt); PyBuffer_Release(&ba); return NULL; }
    Py_ssize_t S = bt.len / 1024;
    PyObject *ret = NULL;
    if (bt.len != S * 1024 || ba.len != S || bo.len != S * 8)
        PyErr_SetString(PyExc_ValueError, "trans must be int32[S, 256], accept uint8[S] and out int64[S]");
    else if (hclasses_core(bt.buf, ba.buf, S, rounds, bo.buf) == 0) { ret = Py_None; Py_INCREF(ret); }
    PyBuffer_Release(&bt); PyBuffer_Release(&ba); PyBuffer_Release(&bo);
    return ret;
}

/* matcher._literal_rest: the length n > 0 of the one string a DFA accepts from state s, written
 * to out[0:n] (at most 1024 bytes), and its end state in *a; 0 when there is none */
static int lit_rest_core(const int32_t *trans, const uint8_t *acc, int32_t s, char *out, int32_t *a) {
    int n = 0;
    while (!acc[s]) {
        const int32_t *row = trans + (Py_ssize_t)s * 256;
        int b = -1, live = 0;
        for (int c = 0; c < 256 && live < 2; c++)
            if (row[c] >= 0) { live++; b = c; }
        if (live != 1 || n >= 1024) return 0;
        out[n++] = (char)b;
        s = row[b];
    }
    if (!n) return 0;
    const int32_t *row = trans + (Py_ssize_t)s * 256;
    for (int c = 0; c < 256; c++) if (row[c] >= 0) return 0;  /* has_out */
    *a = s;
    return n;
}

static PyObject *py_literal_rest(PyObject *self, PyObject *args) {
    PyObject *o_trans, *o_acc;
    Py_ssize_t s;
    if (!PyArg_ParseTuple(args, "OOn", &o_trans, &o_acc, &s)) return NULL;
    Py_buffer bt, ba;
    if (get_ro(o_trans, &bt, 4, "trans") < 0) return NULL;
    if (get_ro(o_acc, &ba, 1, "accept") < 0) { PyBuffer_Release(&bt); return NULL; }
    Py_ssize_t S = bt.len / 1024;
    PyObject *ret = NULL;
    if (bt.len != S * 1024 || ba.len != S || s < 0 || s >= S) {
        PyErr_SetString(PyExc_ValueError, "trans must be int32[S, 256], accept uint8[S] and s in [0, S)");
    } else {
        char out[1024];
        int32_t a = -1;
        int n = lit_rest_core(bt.buf, ba.buf, (int32_t)s, out, &a);
        if (n) ret = Py_BuildValue("(y#i)", out, (Py_ssize_t)n, a);
        else { ret = Py_None; Py_INCREF(ret); }
    }
    PyBuffer_Release(&bt); PyBuffer_Release(&ba);
    return ret;
}

/* first index in the sorted a[0:n] with a[i] > x (right) or a[i] >= x (left) */
static Py_ssize_t bsearch64(const int64_t *a, Py_ssize_t n, int64_t x, int right) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (right ? a[mid] <= x : a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* _CountBase._compute: the bits of a counted walk for (need, room) into out[nw] (in_ids / in_key the
 * inside tokens sorted by key, all_words their bits; close_n the closing nodes' counts, close_ends the
 * tokens ending right after each quote, from close_end_at); [*lo, *hi) the slice of closing nodes.
 * 0, or -1 (ValueError set) on an id outside out. */
typedef struct {
    const int64_t *ids, *key, *close_n, *close_ends, *close_end_at;
    const uint32_t *all;
    Py_ssize_t n, n_close;
    const uint32_t *lv;      /* optional: the inside bits for each room in [lv_lo, lv_lo + n_lv), n_lv rows */
    int64_t lv_lo, n_lv;
} CutTables;

static int cut_core(const CutTables *c, int64_t need, int64_t room, uint32_t *out, Py_ssize_t nw, Py_ssize_t *lo,
                    Py_ssize_t *hi) {
    const int64_t *ids = c->ids;
    Py_ssize_t n = c->n, cut = bsearch64(c->key, n, 2 * room, 1);
    int bad = 0;
    if (c->n_lv && room >= c->lv_lo && room < c->lv_lo + c->n_lv) {  /* a precomputed room: one copy */
        memcpy(out, c->lv + (room - c->lv_lo) * nw, nw * 4);
    } else if (n - cut < cut) {  /* clear the few excluded bits */
        memcpy(out, c->all, nw * 4);
        for (Py_ssize_t j = cut; j < n && !bad; j++) {
            int64_t id = ids[j];
            if (id < 0 || (id >> 5) >= nw) bad = 1;
            else out[id >> 5] &= ~((uint32_t)1 << (id & 31));
        }
    } else {
        memset(out, 0, nw * 4);
        for (Py_ssize_t j = 0; j < cut && !bad; j++) {
            int64_t id = ids[j];
            if (id < 0 || (id >> 5) >= nw) bad = 1;
            else out[id >> 5] |= (uint32_t)1 << (id & 31);
        }
    }
    *lo = bsearch64(c->close_n, c->n_close, need, 0);
    *hi = bsearch64(c->close_n, c->n_close, room, 1);
    for (int64_t j = *hi > *lo ? c->close_end_at[*lo] : 0; !bad && *hi > *lo && j < c->close_end_at[*hi]; j++) {
        int64_t id = c->close_ends[j];
        if (id < 0 || (id >> 5) >= nw) bad = 1;
        else out[id >> 5] |= (uint32_t)1 << (id & 31);
    }
    if (bad) { PyErr_SetString(PyExc_ValueError, "count_cut: ids must be token ids in [0, 32 * len(out))"); return -1; }
    return 0;
}

/* the seven count_cut buffers (the last writable); their CutTables; -1 with an exception set */
static const char *cut_names[7] = {"in_ids", "in_key", "all_words", "close_n", "close_ends", "close_end_at", "out"};

static int cut_tables(PyObject **o, Py_buffer *b, int n_buf, CutTables *c) {
    static const Py_ssize_t sizes[7] = {8, 8, 4, 8, 8, 8, 4};
    int got = 0;
    for (; got < n_buf; got++)
        if ((got == 6 ? get_rw(o[got], &b[got], 4, cut_names[got]) : get_ro(o[got], &b[got], sizes[got], cut_names[got])) < 0) {
            for (int j = 0; j < got; j++) PyBuffer_Release(&b[j]);
            return -1;
        }
    *c = (CutTables){b[0].buf, b[1].buf, b[3].buf, b[4].buf, b[5].buf, b[2].buf, b[0].len / 8, b[3].len / 8};
    if (b[1].len != b[0].len || b[5].len / 8 != c->n_close + 1 || (n_buf == 7 && b[2].len != b[6].len)) {
        PyErr_SetString(PyExc_ValueError, "count_cut: in_ids / in_key, all_words / out or close_n / close_end_at "
                                          "differ in length");
        for (int j = 0; j < n_buf; j++) PyBuffer_Release(&b[j]);
        return -1;
    }
    return 0;
}

static PyObject *py_count_cut(PyObject *self, PyObject *args) {
    PyObject *o[7];
    long long need, room;
    if (!PyArg_ParseTuple(args, "OOOOOOLLO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &need, &room, &o[6]))
        return NULL;
    Py_buffer b[7];
    CutTables c;
    if (cut_tables(o, b, 7, &c) < 0) return NULL;
    Py_ssize_t lo, hi;
    PyObject *ret = NULL;
    if (cut_core(&c, need, room, b[6].buf, b[6].len / 4, &lo, &hi) == 0) ret = Py_BuildValue("(nn)", lo, hi);
    for (int j = 0; j < 7; j++) PyBuffer_Release(&b[j]);
    return ret;
}

/* ---- a state's mask on the compiled core (CompiledGrammar.compute_mask after a state-cache miss),
 * issue 44, third round: the terminal infos (matcher.CompiledGrammar.terminal_info: the tokens that
 * stay inside terminal t from DFA state s, and its exits, (accepting state a, trie nodes)), keyed by
 * integer ids in C tables, and the contribution cache (a terminal state's inside tokens OR-ed with the
 * walks below its exits, keyed by (info, exit charts)); the pure engine in matcher.py is the reference.
 *   set_masks(trie, eos_words uint32[W], counters [(w, lo, hi or -1) or (0, 0, -1) per terminal], cache_size)
 *   mask_into(c, words uint32[W], base_of) -> bytes stepped: the mask of chart c into words; base_of(t, i)
 *       is called once per (counted terminal t, local state i) for its counted walk, as the tuple
 *       (in_ids, in_key, all_words, close_n, close_ends, close_end_at, close_pre, n_max, levels, lv_lo),
 *       close_pre the preorder trie node of each closing quote (-1: no longer token goes on after it),
 *       levels uint32 [k, W] the inside bits of rooms lv_lo .. lv_lo + k - 1 (k = 0: none); not cached
 *   fill_row(c, bitmask int32[B, W], row, base_of) -> True, or None where the bitmask or row does not
 *       fit (the caller takes NumPy's path): chart c's mask from the state cache into one row (fourth
 *       round: GrammarMatcher.fill_next_token_bitmask's whole fast path, hit or miss, in one call)
 *   mask_copy(c, words uint32[W], base_of): the same mask into words (CompiledGrammar.compute_mask)
 *   mask_stats() -> (state-cache hits, misses, bytes stepped by the exit walks of the misses)
 * The state cache is an LRU of cache_size masks keyed by state id (the Python one of the other
 * configurations is an OrderedDict keyed by the same id). The infos are shared as in matcher.py: a generic state's by its horizon class, a counted state's by
 * (local state, clamped room, clamped need); a state from which one string remains has its own. */

typedef struct {
    uint32_t *inside;        /* [nw] the tokens that stay inside the terminal */
    int32_t n_ex;            /* exit j: DFA state ex_a[j], trie nodes ex_nodes[ex_at[j] .. ex_at[j + 1]) */
    int32_t *ex_a;
    int64_t *ex_at, *ex_nodes;
} TInfo;

typedef struct {
    PyObject *held;          /* the tuple base_of returned (its arrays back the views) */
    Py_buffer b[8];          /* in_ids, in_key, all_words, close_n, close_ends, close_end_at, close_pre, levels */
    CutTables c;
    const int64_t *close_pre;
    int64_t n_max;
} CBase;

typedef struct { int32_t n; int64_t *xs; uint32_t *words; } Contrib;

struct Masks {
    PyObject *trie;          /* the trie capsule (held) */
    Trie *t;
    uint32_t *eos, *scratch;
    Py_ssize_t nw;
    int64_t cache_size;
    int32_t n_term;
    int32_t *ctr_w, *ctr_lo, *ctr_hi;  /* per terminal: its Counter (w = 0: none; hi = -1: unbounded) */
    int64_t **cls;           /* per terminal: horizon classes, made on first use */
    int16_t **single;        /* per terminal and DFA state: its one live byte, -1 none or several, -2 not
                                known yet (lit_rest's scan, memoised: a literal's states are met in turn) */
    Map ts, cl, cnt, base, con;  /* (t, s) / (t, class) / (t << 32 | i, room << 32 | need) -> info;
                                    (t, i) -> base; (info, exit charts) -> contribution */
    TInfo *infos;
    int64_t n_infos, cap_infos;
    CBase **bases;
    int64_t n_bases, cap_bases;
    Contrib *cons;
    int64_t n_cons, cap_cons;
    int64_t bytes;           /* held by the infos, the contributions and the state cache */
    /* the state cache (issue 44, fourth round): an LRU of cache_size masks keyed by state id (the set's
     * mslot1), slots linked most recent first; freed slots (a failed computation) are reused first.
     * A slot's mask is sc_words[k]: its own buffer sc_buf[k] (made on first need), or, for a state with
     * one scan group and no EOS, that group's info or contribution itself (read-only, not copied; a
     * slot that points at a contribution, sc_con[k], is dropped when the contributions are forgotten) */
    uint32_t **sc_words, **sc_buf;
    uint8_t *sc_con;
    int32_t *sc_owner, *sc_prev, *sc_next, *sc_free;
    int32_t sc_n, sc_cap, sc_n_free, sc_head, sc_tail;
    int64_t hits, misses, sim_total;
};

typedef struct { int32_t a; int64_t g; } ExPair;
typedef struct { ExPair *a; int64_t n, cap; } ExVec;

static int ex_push(ExVec *v, int32_t a, int64_t g) {
    if (v->n == v->cap) {
        int64_t c = v->cap ? 2 * v->cap : 16;
        ExPair *x = realloc(v->a, sizeof(ExPair) * c);
        if (!x) { PyErr_NoMemory(); return -1; }
        v->a = x; v->cap = c;
    }
    v->a[v->n++] = (ExPair){a, g};
    return 0;
}

static int ex_cmp(const void *x, const void *y) {
    const ExPair *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return p->g < q->g ? -1 : p->g > q->g;
}

static void masks_clear_cons(Masks *m) {
    for (int64_t i = 0; i < m->n_cons; i++) { free(m->cons[i].xs); free(m->cons[i].words); }
    m->bytes -= m->n_cons * (int64_t)(m->nw * 4);
    m->n_cons = 0;
    free(m->con.slots);
    m->con.slots = NULL;
}

static void masks_free(Masks *m) {
    if (!m) return;
    masks_clear_cons(m);
    for (int32_t i = 0; i < m->sc_n; i++) free(m->sc_buf[i]);
    free(m->sc_words); free(m->sc_buf); free(m->sc_con); free(m->sc_owner); free(m->sc_prev); free(m->sc_next); free(m->sc_free);
    Py_XDECREF(m->trie);
    free(m->eos); free(m->scratch); free(m->ctr_w); free(m->ctr_lo); free(m->ctr_hi); free(m->cons);
    if (m->cls) for (int32_t t = 0; t < m->n_term; t++) free(m->cls[t]);
    if (m->single) for (int32_t t = 0; t < m->n_term; t++) free(m->single[t]);
    free(m->cls); free(m->single);
    free(m->ts.slots); free(m->cl.slots); free(m->cnt.slots); free(m->base.slots);
    for (int64_t i = 0; i < m->n_infos; i++) {
        TInfo *x = &m->infos[i];
        free(x->inside); free(x->ex_a); free(x->ex_at); free(x->ex_nodes);
    }
    free(m->infos);
    for (int64_t i = 0; i < m->n_bases; i++) {
        for (int j = 0; j < 8; j++) PyBuffer_Release(&m->bases[i]->b[j]);
        Py_XDECREF(m->bases[i]->held);
        free(m->bases[i]);
    }
    free(m->bases);
    free(m);
}

/* a new info with no tokens and no exits: its id, or -1 (out of memory) */
static int64_t info_new(Masks *m, int zero) {
    if (m->n_infos == m->cap_infos) {
        int64_t c = m->cap_infos ? 2 * m->cap_infos : 64;
        TInfo *x = realloc(m->infos, sizeof(TInfo) * c);
        if (!x) { PyErr_NoMemory(); return -1; }
        m->infos = x; m->cap_infos = c;
    }
    TInfo *x = &m->infos[m->n_infos];
    memset(x, 0, sizeof(TInfo));
    x->inside = zero ? calloc(m->nw ? m->nw : 1, 4) : malloc(4 * (m->nw ? m->nw : 1));
    if (!x->inside) { PyErr_NoMemory(); return -1; }
    m->bytes += (int64_t)(m->nw * 4) + (int64_t)sizeof(TInfo);
    return m->n_infos++;
}

/* the exits of info id from (a, node) pairs, grouped by a; 0 or -1 (out of memory) */
static int info_exits(Masks *m, int64_t id, ExPair *p, int64_t n) {
    if (!n) return 0;
    qsort(p, n, sizeof(ExPair), ex_cmp);
    int32_t k = 1;
    for (int64_t j = 1; j < n; j++) k += p[j].a != p[j - 1].a;
    TInfo *x = &m->infos[id];
    x->ex_a = malloc(sizeof(int32_t) * k);
    x->ex_at = malloc(sizeof(int64_t) * (k + 1));
    x->ex_nodes = malloc(sizeof(int64_t) * n);
    if (!x->ex_a || !x->ex_at || !x->ex_nodes) { PyErr_NoMemory(); return -1; }
    int32_t q = -1;
    for (int64_t j = 0; j < n; j++) {
        if (!j || p[j].a != p[j - 1].a) { q++; x->ex_a[q] = p[j].a; x->ex_at[q] = j; }
        x->ex_nodes[j] = p[j].g;
    }
    x->ex_at[k] = n;
    x->n_ex = k;
    m->bytes += 12LL * k + 8LL * n;
    return 0;
}

typedef struct { const Trie *t; ExVec *v; } ExitKeep;

/* walk exits kept as in terminal_info: only nodes that longer tokens go on below */
static int exit_keep(void *ctx, int d, int32_t g, int32_t a) {
    ExitKeep *x = ctx;
    const Trie *t = x->t;
    if (d >= t->max_len || t->lens[t->tok_end[g] - 1] <= t->node_depth[g]) return 0;
    return ex_push(x->v, a, g);
}

/* the walked info of a generic state (shared by its horizon class; by the state in a counted DFA) */
static int64_t walked_info(Engine *e, int32_t t, int32_t s) {
    Masks *m = e->m;
    int64_t k2 = s;
    if (!m->ctr_w[t]) {
        if (!m->cls[t]) {
            int64_t *cls = malloc(sizeof(int64_t) * (e->n_states[t] ? e->n_states[t] : 1));
            if (!cls) { PyErr_NoMemory(); return -1; }
            if (hclasses_core(e->trans[t], e->acc[t], e->n_states[t], m->t->max_len, cls) < 0) { free(cls); return -1; }
            m->cls[t] = cls;
            m->bytes += 8LL * e->n_states[t];
        }
        k2 = m->cls[t][s];
    }
    int64_t *hit = map_find(&m->cl, t, k2);
    if (hit) return *hit;
    int64_t id = info_new(m, 1);
    if (id < 0) return -1;
    ExVec v = {0};
    ExitKeep x = {m->t, &v};
    int rc = walk_core(m->t, e->trans[t], e->acc[t], s, m->infos[id].inside, m->nw, exit_keep, &x);
    if (rc == 0) rc = info_exits(m, id, v.a, v.n);
    free(v.a);
    if (rc < 0) return -1;
    if (map_put(&m->cl, t, k2, id) < 0) { PyErr_NoMemory(); return -1; }
    return id;
}

/* the counted walk of terminal t's character loop from local state i (base_of(t, i), once) */
static CBase *base_get(Engine *e, int32_t t, int32_t i, PyObject *base_of) {
    Masks *m = e->m;
    int64_t *hit = map_find(&m->base, t, i);
    if (hit) return m->bases[*hit];
    if (!PyCallable_Check(base_of)) { PyErr_SetString(PyExc_TypeError, "base_of must be callable"); return NULL; }
    PyObject *r = PyObject_CallFunction(base_of, "ii", t, i);
    if (!r) return NULL;
    if (m->n_bases == m->cap_bases) {
        int64_t c = m->cap_bases ? 2 * m->cap_bases : 16;
        CBase **x = realloc(m->bases, sizeof(CBase *) * c);
        if (!x) { Py_DECREF(r); PyErr_NoMemory(); return NULL; }
        m->bases = x; m->cap_bases = c;
    }
    PyObject *o[8];
    long long n_max, lv_lo;
    CBase *b = calloc(1, sizeof(CBase));
    if (!b) { Py_DECREF(r); PyErr_NoMemory(); return NULL; }
    if (!PyArg_ParseTuple(r, "OOOOOOOLOL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &n_max, &o[7], &lv_lo)
        || cut_tables(o, b->b, 6, &b->c) < 0) {
        Py_DECREF(r); free(b);
        return NULL;
    }
    if (get_ro(o[6], &b->b[6], 8, "close_pre") < 0 || b->b[6].len / 8 != b->c.n_close || b->b[2].len != m->nw * 4
        || get_ro(o[7], &b->b[7], 4, "levels") < 0 || (m->nw > 0 && b->b[7].len % (m->nw * 4)) || lv_lo < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "base_of: close_pre must match close_n, all_words the mask width, and "
                                              "levels be whole rows of it from a room lv_lo >= 0");
        for (int j = 0; j < 8; j++) if (b->b[j].obj) PyBuffer_Release(&b->b[j]);
        Py_DECREF(r); free(b);
        return NULL;
    }
    b->c.lv = b->b[7].buf;
    b->c.lv_lo = lv_lo;
    b->c.n_lv = m->nw ? b->b[7].len / (m->nw * 4) : 0;
    b->held = r;
    b->close_pre = b->b[6].buf;
    b->n_max = n_max;
    m->bases[m->n_bases] = b;
    if (map_put(&m->base, t, i, m->n_bases++) < 0) { PyErr_NoMemory(); return NULL; }
    return b;
}

/* the info of counted state (k characters done, local state i) of terminal t (_counted_info) */
static int64_t counted_info(Engine *e, int32_t t, int32_t k, int32_t i, PyObject *base_of) {
    Masks *m = e->m;
    CBase *b = base_get(e, t, i, base_of);
    if (!b) return -1;
    int64_t cap = b->n_max + 1, hi = m->ctr_hi[t], lo = m->ctr_lo[t];
    int64_t room = hi < 0 ? cap : (hi - k < cap ? hi - k : cap);
    int64_t need = lo - k > 0 ? lo - k : 0;
    if (need > cap) need = cap;
    int64_t k1 = ((int64_t)t << 32) | (uint32_t)i, k2 = (int64_t)(((uint64_t)room << 32) | (uint32_t)need);
    int64_t *hit = map_find(&m->cnt, k1, k2);
    if (hit) return *hit;
    int64_t id = info_new(m, 0);  /* cut_core writes every word */
    if (id < 0) return -1;
    Py_ssize_t a, z;
    if (cut_core(&b->c, need, room, m->infos[id].inside, m->nw, &a, &z) < 0) return -1;
    ExVec v = {0};
    int rc = 0;
    for (Py_ssize_t j = a; j < z && rc == 0; j++)
        if (b->close_pre[j] >= 0) rc = ex_push(&v, e->n_states[t] - 1, b->close_pre[j]);
    if (rc == 0) rc = info_exits(m, id, v.a, v.n);
    free(v.a);
    if (rc < 0) return -1;
    if (map_put(&m->cnt, k1, k2, id) < 0) { PyErr_NoMemory(); return -1; }
    return id;
}

/* lit_rest_core of terminal t from state s with each state's one live byte memoised (Masks.single): the
 * states of a literal are first visited one after the other, and each visit's rest is the next one's
 * plus a byte, so the 256-entry row scans are done once per state instead of once per visit and state
 * after it. The same result as lit_rest_core: n > 0 and the rest in out[0:n], its end state in *a; 0
 * when no single string remains; -1 out of memory (an exception set). */
static int lit_rest_memo(Engine *e, int32_t t, int32_t s, char *out, int32_t *a) {
    Masks *m = e->m;
    int32_t S = e->n_states[t];
    const int32_t *trans = e->trans[t];
    const uint8_t *acc = e->acc[t];
    int16_t *one = m->single[t];
    if (!one) {
        one = malloc(sizeof(int16_t) * (S ? S : 1));
        if (!one) { PyErr_NoMemory(); return -1; }
        for (int32_t k = 0; k < S; k++) one[k] = -2;
        m->single[t] = one;
        m->bytes += 2LL * S;
    }
    int n = 0;
    while (!acc[s]) {
        if (one[s] == -2) {
            const int32_t *row = trans + (Py_ssize_t)s * 256;
            int b = -1, live = 0;
            for (int c = 0; c < 256 && live < 2; c++)
                if (row[c] >= 0) { live++; b = c; }
            one[s] = (int16_t)(live == 1 ? b : -1);
        }
        int b = one[s];
        if (b < 0 || n >= 1024) return 0;
        out[n++] = (char)b;
        s = trans[(Py_ssize_t)s * 256 + b];
    }
    if (!n || e->has_out[t][s]) return 0;
    *a = s;
    return n;
}

/* the info of terminal t in DFA state s (terminal_info), made on first use: -1 with an exception set */
static int64_t info_of(Engine *e, int32_t t, int32_t s, PyObject *base_of) {
    Masks *m = e->m;
    int64_t *hit = map_find(&m->ts, t, s);
    if (hit) return *hit;
    int32_t S = e->n_states[t], w = m->ctr_w[t];
    int64_t id;
    if (w > 0 && s > 0 && s < S - 1) id = counted_info(e, t, (s - 1) / w, (s - 1) % w, base_of);
    else {
        char rest[1024];
        int32_t a = -1;
        int n = lit_rest_memo(e, t, s, rest, &a);
        if (n < 0) return -1;
        if (n) {  /* a single string remains: the literal descent */
            id = info_new(m, 1);
            if (id < 0) return -1;
            int32_t g = literal_core(m->t, (const uint8_t *)rest, n, m->infos[id].inside, m->nw);
            ExPair p = {a, g};
            if (g >= 0 && info_exits(m, id, &p, 1) < 0) return -1;
        } else id = walked_info(e, t, s);
    }
    if (id < 0) return -1;
    if (map_put(&m->ts, t, s, id) < 0) { PyErr_NoMemory(); return -1; }
    return id;
}

static void sc_unlink(Masks *m, int32_t k);

/* forget the state-cache slots that point at a contribution (before the contributions are freed) */
static void sc_drop_cons(Engine *e) {
    Masks *m = e->m;
    for (int32_t k = 0; k < m->sc_n; k++)
        if (m->sc_con[k]) {
            m->sc_con[k] = 0;
            e->sets[m->sc_owner[k]]->mslot1 = 0;
            sc_unlink(m, k);
            m->sc_words[k] = NULL;
            m->sc_free[m->sc_n_free++] = k;
        }
}

/* the contribution of scan group (t, st) of chart c with info id (inside tokens and the walks below its
 * exits, from their exit charts), cached by (info, exit charts): NULL with an exception set */
static const uint32_t *contrib(Engine *e, int32_t c, int32_t t, int32_t st, int64_t id, int64_t *n_sim) {
    Masks *m = e->m;
    TInfo *x = &m->infos[id];
    int32_t n = x->n_ex;
    int64_t xs[64];
    int64_t *xp = n <= 64 ? xs : malloc(sizeof(int64_t) * n);
    if (!xp) { PyErr_NoMemory(); return NULL; }
    uint64_t h = 0x51ed270b27a3c4e1ULL;
    for (int32_t j = 0; j < n; j++) {
        int64_t r = exit_chart(e, c, t, st, x->ex_a[j]);
        if (r == -2) { if (xp != xs) free(xp); return NULL; }
        xp[j] = r;
        h = hmix(h, (uint64_t)r);
    }
    int64_t k2 = n == 1 ? xp[0] : (int64_t)(h >> 1);
    if (!m->con.slots && map_init(&m->con) < 0) { if (xp != xs) free(xp); PyErr_NoMemory(); return NULL; }
    int64_t *hit = map_find(&m->con, id, k2);
    uint32_t *words = NULL;
    int store = 1;
    if (hit) {
        Contrib *q = &m->cons[*hit];
        if (q->n == n && !memcmp(q->xs, xp, sizeof(int64_t) * n)) { if (xp != xs) free(xp); return q->words; }
        store = 0;  /* a hash collision of two exit-chart lists: computed, not cached */
    }
    if (store && m->n_cons >= m->cache_size) {  /* bounded: forget every contribution */
        sc_drop_cons(e);
        masks_clear_cons(m);
        if (map_init(&m->con) < 0) { if (xp != xs) free(xp); PyErr_NoMemory(); return NULL; }
    }
    if (store && m->n_cons == m->cap_cons) {
        int64_t cc = m->cap_cons ? 2 * m->cap_cons : 64;
        Contrib *y = realloc(m->cons, sizeof(Contrib) * cc);
        if (!y) { if (xp != xs) free(xp); PyErr_NoMemory(); return NULL; }
        m->cons = y; m->cap_cons = cc;
    }
    words = store ? malloc(m->nw * 4 + 4) : m->scratch;
    int64_t *keep = store ? malloc(sizeof(int64_t) * (n + 1)) : NULL;
    if (!words || (store && !keep)) {
        if (store) { free(words); free(keep); }
        if (xp != xs) free(xp);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(words, x->inside, m->nw * 4);
    int rc = 0;
    for (int32_t j = 0; j < n && rc == 0; j++)
        if (xp[j] >= 0)
            for (int64_t q = x->ex_at[j]; q < x->ex_at[j + 1] && rc == 0; q++)
                rc = sim_or(e, m->t, (int32_t)xp[j], x->ex_nodes[q], words, m->nw, n_sim);
    if (rc == 0 && store) {
        memcpy(keep, xp, sizeof(int64_t) * n);
        m->cons[m->n_cons] = (Contrib){n, keep, words};
        if (map_put(&m->con, id, k2, m->n_cons++) < 0) { PyErr_NoMemory(); rc = -1; }
        else m->bytes += (int64_t)(m->nw * 4) + 8LL * n;
    } else if (store) { free(words); free(keep); }
    if (xp != xs) free(xp);
    return rc == 0 ? words : NULL;
}

static PyObject *eng_set_masks(Engine *e, PyObject *args) {
    PyObject *cap, *o_eos, *o_ctr;
    long long cache_size;
    if (!PyArg_ParseTuple(args, "OOOL", &cap, &o_eos, &o_ctr, &cache_size)) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    if (cache_size < 1) { PyErr_SetString(PyExc_ValueError, "cache_size must be >= 1"); return NULL; }
    Py_buffer be;
    if (get_ro(o_eos, &be, 4, "eos_words") < 0) return NULL;
    PyObject *ctr = PySequence_Fast(o_ctr, "counters must be a sequence");
    Masks *m = calloc(1, sizeof(Masks));
    if (!ctr || !m) { if (ctr && !m) PyErr_NoMemory(); goto fail; }
    if (PySequence_Fast_GET_SIZE(ctr) != e->n_term) {
        PyErr_Format(PyExc_ValueError, "counters must have one entry per terminal (%d)", e->n_term);
        goto fail;
    }
    m->n_term = e->n_term;
    m->nw = be.len / 4;
    m->cache_size = cache_size < INT32_MAX ? cache_size : INT32_MAX;
    m->sc_head = m->sc_tail = -1;
    m->t = t;
    m->eos = malloc(be.len + 4);
    m->scratch = malloc(be.len + 4);
    m->ctr_w = calloc(e->n_term + 1, sizeof(int32_t));
    m->ctr_lo = calloc(e->n_term + 1, sizeof(int32_t));
    m->ctr_hi = calloc(e->n_term + 1, sizeof(int32_t));
    m->cls = calloc(e->n_term + 1, sizeof(int64_t *));
    m->single = calloc(e->n_term + 1, sizeof(int16_t *));
    if (!m->eos || !m->scratch || !m->ctr_w || !m->ctr_lo || !m->ctr_hi || !m->cls || !m->single || map_init(&m->ts) < 0
        || map_init(&m->cl) < 0 || map_init(&m->cnt) < 0 || map_init(&m->base) < 0) { PyErr_NoMemory(); goto fail; }
    memcpy(m->eos, be.buf, be.len);
    for (int32_t k = 0; k < e->n_term; k++) {
        int w, lo, hi;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ctr, k), "iii", &w, &lo, &hi)) goto fail;
        if (w < 0 || lo < 0 || (w > 0 && e->n_states[k] < 2)) {
            PyErr_SetString(PyExc_ValueError, "a counter needs w >= 0, lo >= 0 and a DFA of at least 2 states");
            goto fail;
        }
        m->ctr_w[k] = w; m->ctr_lo[k] = lo; m->ctr_hi[k] = hi;
    }
    Py_INCREF(cap);
    m->trie = cap;
    Py_DECREF(ctr);
    PyBuffer_Release(&be);
    masks_free(e->m);
    for (int32_t i = 0; i < e->n_sets; i++) e->sets[i]->mslot1 = 0;  /* the old state cache is gone */
    e->m = m;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(ctr);
    PyBuffer_Release(&be);
    masks_free(m);
    return NULL;
}

/* the mask of chart c into out[nw] (CompiledGrammar.compute_mask after a state-cache miss): per scan
 * group its terminal info, or its contribution where the info has exits, OR-ed together, and EOS where
 * the chart accepts; 0, or -1 with an exception set */
static int mask_compute(Engine *e, int32_t c, uint32_t *out, PyObject *base_of, int64_t *n_sim) {
    Masks *m = e->m;
    ESet *s = e->sets[c];  /* the set (not the array of sets) stays in place while others are built */
    if (!s->n_scan) memset(out, 0, m->nw * 4);
    for (int32_t g = 0; g < s->n_scan; g++) {
        int32_t t = s->scan_t[g], st = s->scan_s[g];
        int64_t id = info_of(e, t, st, base_of);
        if (id < 0) return -1;
        const uint32_t *src = m->infos[id].n_ex ? contrib(e, c, t, st, id, n_sim) : m->infos[id].inside;
        if (!src) return -1;
        if (!g) memcpy(out, src, m->nw * 4);  /* the first group copied, the others OR-ed in */
        else for (Py_ssize_t k = 0; k < m->nw; k++) out[k] |= src[k];
    }
    if (s->accepting)
        for (Py_ssize_t k = 0; k < m->nw; k++) out[k] |= m->eos[k];
    return 0;
}

static PyObject *eng_mask_into(Engine *e, PyObject *args) {
    long long c;
    PyObject *o_words, *base_of;
    if (!PyArg_ParseTuple(args, "LOO", &c, &o_words, &base_of)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    Masks *m = e->m;
    if (!m) { PyErr_SetString(PyExc_RuntimeError, "mask_into needs set_masks first"); return NULL; }
    Py_buffer bw;
    if (get_rw(o_words, &bw, 4, "words") < 0) return NULL;
    PyObject *ret = NULL;
    int64_t n_sim = 0;
    if (bw.len != m->nw * 4) PyErr_Format(PyExc_ValueError, "words must have %zd items", m->nw);
    else if (mask_compute(e, (int32_t)c, bw.buf, base_of, &n_sim) == 0) ret = PyLong_FromLongLong((long long)n_sim);
    PyBuffer_Release(&bw);
    return ret;
}

static void sc_unlink(Masks *m, int32_t k) {
    if (m->sc_prev[k] >= 0) m->sc_next[m->sc_prev[k]] = m->sc_next[k]; else m->sc_head = m->sc_next[k];
    if (m->sc_next[k] >= 0) m->sc_prev[m->sc_next[k]] = m->sc_prev[k]; else m->sc_tail = m->sc_prev[k];
}

static void sc_front(Masks *m, int32_t k) {
    m->sc_prev[k] = -1;
    m->sc_next[k] = m->sc_head;
    if (m->sc_head >= 0) m->sc_prev[m->sc_head] = k; else m->sc_tail = k;
    m->sc_head = k;
}

/* grow the state cache's slot arrays (at most cache_size slots): 0, or -1 with an exception set */
static int sc_grow(Masks *m) {
    int32_t cap = m->sc_cap ? 2 * m->sc_cap : 64;
    if (cap > m->cache_size) cap = (int32_t)m->cache_size;
    uint32_t **w = realloc(m->sc_words, sizeof(uint32_t *) * cap);
    if (!w) { PyErr_NoMemory(); return -1; }
    m->sc_words = w;
    w = realloc(m->sc_buf, sizeof(uint32_t *) * cap);
    if (!w) { PyErr_NoMemory(); return -1; }
    m->sc_buf = w;
    uint8_t *cn = realloc(m->sc_con, cap);
    if (!cn) { PyErr_NoMemory(); return -1; }
    m->sc_con = cn;
    int32_t **arr[4] = {&m->sc_owner, &m->sc_prev, &m->sc_next, &m->sc_free};
    for (int j = 0; j < 4; j++) {
        int32_t *x = realloc(*arr[j], sizeof(int32_t) * cap);
        if (!x) { PyErr_NoMemory(); return -1; }
        *arr[j] = x;
    }
    m->bytes += (int64_t)(cap - m->sc_cap) * 33;
    m->sc_cap = cap;
    return 0;
}

/* chart c's mask from the state cache (an LRU of cache_size masks keyed by state id), computed on a
 * miss into a new slot or the least recently used one: NULL with an exception set */
static const uint32_t *mask_cached(Engine *e, int32_t c, PyObject *base_of) {
    Masks *m = e->m;
    ESet *s = e->sets[c];
    if (s->mslot1) {
        int32_t k = s->mslot1 - 1;
        if (m->sc_head != k) { sc_unlink(m, k); sc_front(m, k); }
        m->hits++;
        return m->sc_words[k];
    }
    m->misses++;
    int32_t k;
    if (m->sc_n_free) k = m->sc_free[--m->sc_n_free];
    else if (m->sc_n < m->cache_size) {
        if (m->sc_n == m->sc_cap && sc_grow(m) < 0) return NULL;
        k = m->sc_n++;
        m->sc_buf[k] = NULL;
    } else {  /* full: the least recently used mask makes room */
        k = m->sc_tail;
        sc_unlink(m, k);
        e->sets[m->sc_owner[k]]->mslot1 = 0;
    }
    m->sc_con[k] = 0;
    m->sc_words[k] = NULL;
    int64_t n_sim = 0;
    const uint32_t *src = NULL;
    int64_t id = -1;
    if (s->n_scan == 1 && !s->accepting) {  /* one group: its info or contribution is the mask */
        int32_t t = s->scan_t[0], st = s->scan_s[0];
        id = info_of(e, t, st, base_of);
        if (id >= 0) src = m->infos[id].n_ex ? contrib(e, c, t, st, id, &n_sim) : m->infos[id].inside;
        if (!src) { m->sc_free[m->sc_n_free++] = k; return NULL; }
    }
    if (!src || src == m->scratch) {  /* a mask of its own (the scratch of an uncached contribution copied) */
        if (!m->sc_buf[k]) {
            m->sc_buf[k] = malloc(m->nw * 4 + 4);
            if (!m->sc_buf[k]) { m->sc_free[m->sc_n_free++] = k; PyErr_NoMemory(); return NULL; }
            m->bytes += (int64_t)(m->nw * 4);
        }
        if (src) memcpy(m->sc_buf[k], src, m->nw * 4);
        else if (mask_compute(e, c, m->sc_buf[k], base_of, &n_sim) < 0) {
            m->sc_free[m->sc_n_free++] = k;
            return NULL;
        }
        m->sc_words[k] = m->sc_buf[k];
    } else {
        m->sc_words[k] = (uint32_t *)src;
        m->sc_con[k] = m->infos[id].n_ex != 0;
    }
    m->sim_total += n_sim;
    m->sc_owner[k] = c;
    e->sets[c]->mslot1 = k + 1;  /* e->sets may have moved while the mask was computed: re-read */
    sc_front(m, k);
    return m->sc_words[k];
}

/* fill_row(id, bitmask, row, base_of) -> True, or None where bitmask is not a C-contiguous int32
 * [B, W] buffer or row is outside [-B, B) (the caller then takes NumPy's path, which checks and
 * raises): chart id's mask (from the state cache) copied into row `row` of bitmask */
static PyObject *eng_fill_row(Engine *e, PyObject *args) {
    long long c;
    Py_ssize_t row;
    PyObject *o_bm, *base_of;
    if (!PyArg_ParseTuple(args, "LOnO", &c, &o_bm, &row, &base_of)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    Masks *m = e->m;
    if (!m) { PyErr_SetString(PyExc_RuntimeError, "fill_row needs set_masks first"); return NULL; }
    Py_buffer b;
    if (PyObject_GetBuffer(o_bm, &b, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const char *f = b.format ? b.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b.itemsize != 4 || strcmp(f, "i") || b.ndim != 2 || b.shape[1] != m->nw || row < -b.shape[0]
        || row >= b.shape[0]) {
        PyBuffer_Release(&b);
        Py_RETURN_NONE;
    }
    if (row < 0) row += b.shape[0];
    const uint32_t *w = mask_cached(e, (int32_t)c, base_of);
    if (w) memcpy((char *)b.buf + row * m->nw * 4, w, m->nw * 4);
    PyBuffer_Release(&b);
    if (!w) return NULL;
    Py_RETURN_TRUE;
}

/* mask_copy(id, words uint32[W], base_of): chart id's mask (from the state cache) copied into words */
static PyObject *eng_mask_copy(Engine *e, PyObject *args) {
    long long c;
    PyObject *o_words, *base_of;
    if (!PyArg_ParseTuple(args, "LOO", &c, &o_words, &base_of)) return NULL;
    if (check_id(e, c) < 0) return NULL;
    Masks *m = e->m;
    if (!m) { PyErr_SetString(PyExc_RuntimeError, "mask_copy needs set_masks first"); return NULL; }
    Py_buffer bw;
    if (get_rw(o_words, &bw, 4, "words") < 0) return NULL;
    const uint32_t *w = NULL;
    if (bw.len != m->nw * 4) PyErr_Format(PyExc_ValueError, "words must have %zd items", m->nw);
    else if ((w = mask_cached(e, (int32_t)c, base_of))) memcpy(bw.buf, w, m->nw * 4);
    PyBuffer_Release(&bw);
    if (!w) return NULL;
    Py_RETURN_NONE;
}

/* mask_stats() -> (state-cache hits, misses, bytes stepped by the misses' exit walks) */
static PyObject *eng_mask_stats(Engine *e, PyObject *noargs) {
    Masks *m = e->m;
    if (!m) return Py_BuildValue("(LLL)", 0LL, 0LL, 0LL);
    return Py_BuildValue("(LLL)", (long long)m->hits, (long long)m->misses, (long long)m->sim_total);
}

static int64_t masks_bytes(const Masks *m) { return m ? m->bytes : 0; }

static PyMethodDef methods[] = {
    {"trie", py_trie, METH_VARARGS, "Copy the sorted vocabulary trie into a capsule."},
    {"walk", py_walk, METH_VARARGS, "Walk the trie through a DFA: inside tokens into words, exits returned."},
    {"walk_counted", py_walk_counted, METH_VARARGS, "Counted walk of a string's character loop."},
    {"literal", py_literal, METH_VARARGS, "Tokens that are prefixes of a string, and its trie node."},
    {"set_bits", py_set_bits, METH_VARARGS, "OR the bits of int64 token ids into uint32 words."},
    {"clear_bits", py_clear_bits, METH_VARARGS, "Clear the bits of int64 token ids in uint32 words."},
    {"same_bytes", py_same_bytes, METH_VARARGS, "Whether two C-contiguous buffers hold the same bytes."},
    {"or_into", py_or_into, METH_VARARGS, "out = the OR of a sequence of packed uint32 arrays."},
    {"fill_rows", py_fill_rows, METH_VARARGS, "Copy packed mask words into rows of an int32 bitmask."},
    {"mask_logits", py_mask_logits, METH_VARARGS, "Set float32 logits to -inf where the bitmask's bit is 0."},
    {"horizon_classes", py_horizon_classes, METH_VARARGS, "Moore refinement of a DFA's states (horizon classes)."},
    {"literal_rest", py_literal_rest, METH_VARARGS, "The one string a DFA accepts from a state, or None."},
    {"count_cut", py_count_cut, METH_VARARGS, "A counted walk's bits for (need, room), and its closing slice."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_zapcore", "ZapFormat's compiled core.", -1, methods};

PyMODINIT_FUNC PyInit__zapcore(void) {
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
