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
 *   trie(node_byte, lens, lcp, node_start, tok_end, node_depth, node_m, order, max_len) -> capsule
 *   walk(trie, trans, accept, s, words) -> [(depth, node, state)]   (inside tokens OR-ed into words)
 *   walk_counted(trie, local, i, words) -> (ids int64, keys int64, closing list): the inside tokens
 *       sorted (stable counting sort) by key 2 * characters + (not between characters), their bits
 *       OR-ed into words
 *   literal(trie, rest, words) -> (depth, node) or None: the tokens that are non-empty prefixes of
 *       rest OR-ed into words, and the trie node of rest when longer tokens start with it
 *   set_bits(words, ids) / clear_bits(words, ids): OR in / clear the bits of int64 token ids.
 *   fill_rows(bitmask, rows, words_list): copy packed words into bitmask rows (the batch fill).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_ssize_t n;        /* tokens in sorted order */
    Py_ssize_t n_nodes;  /* trie nodes */
    int max_len;
    uint8_t *node_byte;  /* [n_nodes] the byte leading into each preorder node */
    int32_t *lens, *lcp, *node_start;
    int32_t *tok_end, *node_depth, *node_m;  /* per preorder node */
    int64_t *order;      /* token id of each sorted position */
} Trie;

static void trie_free(PyObject *cap) {
    Trie *t = (Trie *)PyCapsule_GetPointer(cap, "zapcore.trie");
    if (!t) return;
    free(t->node_byte); free(t->lens); free(t->lcp); free(t->node_start);
    free(t->tok_end); free(t->node_depth); free(t->node_m); free(t->order);
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
    PyObject *node_byte, *lens, *lcp, *node_start, *tok_end, *node_depth, *node_m, *order;
    int max_len;
    if (!PyArg_ParseTuple(args, "OOOOOOOOi", &node_byte, &lens, &lcp, &node_start, &tok_end, &node_depth,
                          &node_m, &order, &max_len))
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
    PyObject *cap = PyCapsule_New(t, "zapcore.trie", trie_free);
    if (!cap) goto fail;
    return cap;
fail:
    free(t->node_byte); free(t->lens); free(t->lcp); free(t->node_start);
    free(t->tok_end); free(t->node_depth); free(t->node_m); free(t->order);
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

/* walk(trie, trans int32[S, 256], accept uint8[S], s, words uint32[W]) */
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
    const int32_t *trans = bt.buf;
    const uint8_t *acc = ba.buf;
    uint32_t *words = bw.buf;
    Py_ssize_t n_states = ba.len, n_words = bw.len / 4;
    PyObject *exits = NULL;
    int32_t *st = NULL;
    if (bt.len != n_states * 256 * 4 || s0 < 0 || s0 >= n_states) {
        PyErr_SetString(PyExc_ValueError, "trans must be int32 [S, 256] with accept [S] and 0 <= s < S");
        goto done;
    }
    exits = PyList_New(0);
    st = malloc(sizeof(int32_t) * (t->max_len + 2));
    if (!exits || !st) { if (!st) PyErr_NoMemory(); Py_CLEAR(exits); goto done; }
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
            if (acc[s2]) {
                PyObject *e = Py_BuildValue("(iii)", d + 1, t->node_m[g], s2);
                if (!e || PyList_Append(exits, e) < 0) { Py_XDECREF(e); Py_CLEAR(exits); goto done; }
                Py_DECREF(e);
            }
        }
        if (dead) { i = t->tok_end[g]; continue; }  /* skip the rejected node's subtree */
        int64_t id = t->order[i];
        if (id >> 5 < n_words) words[id >> 5] |= (uint32_t)1 << (id & 31);
        i++;
    }
done:
    free(st);
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
    int64_t *ids = NULL, *keys = NULL, *s_ids = NULL, *s_keys = NULL;
    Py_ssize_t *bucket = NULL;
    Py_ssize_t k = 0;
    int64_t kmax = 0;
    if (bl.len != (Py_ssize_t)w * 256 * 4 || i0 < 0 || i0 >= w) {
        PyErr_SetString(PyExc_ValueError, "local must be int32 [w, 256] and 0 <= i < w");
        goto done;
    }
    st = malloc(sizeof(int32_t) * (t->max_len + 2));
    cnt = malloc(sizeof(int32_t) * (t->max_len + 2));
    ids = malloc(sizeof(int64_t) * (t->n + 1));
    keys = malloc(sizeof(int64_t) * (t->n + 1));
    closing = PyList_New(0);
    if (!st || !cnt || !ids || !keys || !closing) { PyErr_NoMemory(); goto done; }
    st[0] = i0;
    cnt[0] = 0;
    Py_ssize_t i = 0;
    while (i < t->n) {
        int l = t->lcp[i], L = t->lens[i];
        int32_t g = t->node_start[i];
        int dead = 0;
        for (int d = l; d < L; d++, g++) {
            int32_t v = local[(Py_ssize_t)st[d] * 256 + t->node_byte[g]];
            if (v == w + 1) {  /* the closing quote: recorded with the count before it */
                PyObject *e = Py_BuildValue("(iii)", d + 1, t->node_m[g], cnt[d]);
                if (!e || PyList_Append(closing, e) < 0) { Py_XDECREF(e); goto done; }
                Py_DECREF(e);
                dead = 1;
                break;
            }
            if (v < 0) { dead = 1; break; }
            if (v == w) { st[d + 1] = 0; cnt[d + 1] = cnt[d] + 1; }
            else { st[d + 1] = v; cnt[d + 1] = cnt[d]; }
        }
        if (dead) { i = t->tok_end[g]; continue; }
        int64_t id = t->order[i];
        ids[k] = id;
        keys[k] = 2 * (int64_t)cnt[L] + (st[L] != 0);
        if (keys[k] > kmax) kmax = keys[k];
        if (id >> 5 < n_words) words[id >> 5] |= (uint32_t)1 << (id & 31);
        k++;
        i++;
    }
    /* stable counting sort by key (keys are at most 2 * max_len + 1) */
    bucket = calloc(kmax + 2, sizeof(Py_ssize_t));
    s_ids = malloc(sizeof(int64_t) * (k + 1));
    s_keys = malloc(sizeof(int64_t) * (k + 1));
    if (!bucket || !s_ids || !s_keys) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < k; j++) bucket[keys[j] + 1]++;
    for (int64_t b = 1; b <= kmax + 1; b++) bucket[b] += bucket[b - 1];
    for (Py_ssize_t j = 0; j < k; j++) {
        Py_ssize_t at = bucket[keys[j]]++;
        s_ids[at] = ids[j];
        s_keys[at] = keys[j];
    }
    result = Py_BuildValue("(y#y#O)", (char *)s_ids, k * 8, (char *)s_keys, k * 8, closing);
done:
    Py_XDECREF(closing);
    free(st); free(cnt); free(ids); free(keys); free(s_ids); free(s_keys); free(bucket);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bw);
    return result;
}

/* literal(trie, rest bytes, words uint32[W]): see TokenIndex.literal. Children of a node are
 * found by a sibling scan in sorted order: the child at depth D opened by token j is node
 * node_start[j] + D - 1 - lcp[j], and its next sibling is opened by token tok_end[child]. */
static PyObject *py_literal(PyObject *self, PyObject *args) {
    PyObject *cap, *o_words;
    const char *rest;
    Py_ssize_t n_rest;
    if (!PyArg_ParseTuple(args, "Oy#O", &cap, &rest, &n_rest, &o_words)) return NULL;
    Trie *t = get_trie(cap);
    if (!t) return NULL;
    Py_buffer bw;
    if (get_rw(o_words, &bw, 4, "words") < 0) return NULL;
    uint32_t *words = bw.buf;
    Py_ssize_t n_words = bw.len / 4, a = 0, e = t->n, j = 0, ends = 0;
    int32_t c = -1;
    int found = 1;
    for (Py_ssize_t d = 0; d < n_rest; d++) {
        int D = (int)d + 1;
        uint8_t b = (uint8_t)rest[d];
        j = a;
        while (j < e && t->lens[j] == D - 1) j++;  /* tokens ending at the parent */
        c = -1;
        while (j < e) {
            int32_t k = t->node_start[j] + (D - 1 - t->lcp[j]);
            uint8_t kb = t->node_byte[k];
            if (kb == b) { c = k; break; }
            if (kb > b) break;
            j = t->tok_end[k];
        }
        if (c < 0) { found = 0; break; }
        a = j;
        e = t->tok_end[c];
        ends = 0;
        while (j + ends < e && t->lens[j + ends] == D) {  /* tokens ending at this node */
            int64_t id = t->order[j + ends];
            if (id >> 5 < n_words) words[id >> 5] |= (uint32_t)1 << (id & 31);
            ends++;
        }
    }
    PyBuffer_Release(&bw);
    if (!found || n_rest == 0 || n_rest >= t->max_len || e <= a + ends) Py_RETURN_NONE;
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
static PyObject *py_clear_bits(PyObject *self, PyObject *args) { return bits_op(args, 0); }

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

static PyMethodDef methods[] = {
    {"trie", py_trie, METH_VARARGS, "Copy the sorted vocabulary trie into a capsule."},
    {"walk", py_walk, METH_VARARGS, "Walk the trie through a DFA: inside tokens into words, exits returned."},
    {"walk_counted", py_walk_counted, METH_VARARGS, "Counted walk of a string's character loop."},
    {"literal", py_literal, METH_VARARGS, "Tokens that are prefixes of a string, and its trie node."},
    {"set_bits", py_set_bits, METH_VARARGS, "OR the bits of int64 token ids into uint32 words."},
    {"clear_bits", py_clear_bits, METH_VARARGS, "Clear the bits of int64 token ids in uint32 words."},
    {"fill_rows", py_fill_rows, METH_VARARGS, "Copy packed mask words into rows of an int32 bitmask."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_zapcore", "ZapFormat's compiled core.", -1, methods};

PyMODINIT_FUNC PyInit__zapcore(void) { return PyModule_Create(&module); }
