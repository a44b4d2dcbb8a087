/* The quality analysis's exact integer passes, compiled: the analysis copy's area resize
 * (transforms.offline.area_resize) and the copy's luma, levels and channel sums
 * (transforms.offline.quality). Each gives the same integers as the numpy form beside its
 * caller, which stays the reference (and the path where this is not built).
 *
 * resize_uint8(source, target, height, width, channels, out_height, out_width) fills `target`
 * (out_height x out_width x channels uint8, C order) with the area average of `source`
 * (height x width x channels uint8, C order), rounded half up.
 *
 * Why: numpy runs the resize as ~10 whole-array passes (a gather and a widening multiply-add
 * per tap and axis, then the rounding), ~1 ms of a photo's ~5 ms of CPU. Here each output row
 * is the weighted sum of its 2-3 input rows (a loop the compiler vectorizes), reduced along the
 * row while it is in cache, then rounded: the same sums, exact in integers, so the result
 * cannot depend on the order of the additions.
 *
 * Weights: output cell i of an axis of n pixels resized to `cells` covers [i*n, (i+1)*n) in
 * units of 1/cells pixel; input pixel j covers [j*cells, (j+1)*cells); the weight is the
 * overlap, an integer. A cell's weights sum to n, so a channel's sum is at most
 * 255 * height * width, and the average rounded half up is (2 * sum + d) / (2 * d), d =
 * height * width, by integer division.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    Py_ssize_t *first;  /* per cell: its first input pixel */
    int *count;         /* per cell: how many input pixels it overlaps */
    uint32_t *weight;   /* per cell: `taps` weights (the unused ones 0) */
    int taps;
} Axis;

static void axis_free(Axis *axis) {
    free(axis->first);
    free(axis->count);
    free(axis->weight);
    axis->first = NULL;
    axis->count = NULL;
    axis->weight = NULL;
}

static int axis_make(Axis *axis, Py_ssize_t n, Py_ssize_t cells) {
    axis->taps = (int)((n + cells - 1) / cells) + 1;
    axis->first = malloc(sizeof(Py_ssize_t) * cells);
    axis->count = malloc(sizeof(int) * cells);
    axis->weight = calloc((size_t)cells * axis->taps, sizeof(uint32_t));
    if (!axis->first || !axis->count || !axis->weight) {
        axis_free(axis);
        return -1;
    }
    for (Py_ssize_t i = 0; i < cells; i++) {
        int64_t low = (int64_t)i * n, high = (int64_t)(i + 1) * n;
        int64_t first = low / cells, last = (high - 1) / cells;
        axis->first[i] = (Py_ssize_t)first;
        axis->count[i] = (int)(last - first + 1);
        for (int64_t j = first; j <= last; j++) {
            int64_t start = j * cells > low ? j * cells : low;
            int64_t end = (j + 1) * cells < high ? (j + 1) * cells : high;
            axis->weight[i * axis->taps + (j - first)] = (uint32_t)(end - start);
        }
    }
    return 0;
}

static void resize(const uint8_t *source, uint8_t *target, Py_ssize_t width, Py_ssize_t channels,
                   Py_ssize_t out_height, Py_ssize_t out_width, uint64_t divisor,
                   const Axis *rows, const Axis *columns, uint32_t *row_sums,
                   uint32_t *totals) {
    const Py_ssize_t row_length = width * channels;
    /* rounded half up, (2 * sum + d) // (2 * d) is floor((sum + d / 2 + 1 / 4) / d): the added
       quarter keeps the exact quotient at least 1 / (4 d) from an integer (> 2**-42 for d <
       2**40), far more than the float64 error of sum + bias (exact: < 2**48) times the rounded
       reciprocal (< 256 * 2**-52) */
    const double bias = (double)divisor / 2 + 0.25, reciprocal = 1.0 / (double)divisor;
    const int taps = columns->taps;
    const Py_ssize_t out_length = out_width * channels;
    /* RGB shrunk at most 2x (three taps a cell), below 2**21 pixels: a sum fits a signed
       32-bit integer. The common case (a photo decoded at the DCT scale); the rest: 64 bits. */
    const int rgb_halving = channels == 3 && taps == 3 && divisor < ((uint64_t)1 << 21);
    for (Py_ssize_t i = 0; i < out_height; i++) {
        /* the row of column sums: each weighted input row added in one vectorized loop */
        const uint32_t *row_weights = rows->weight + i * rows->taps;
        const uint8_t *line = source + rows->first[i] * row_length;
        uint32_t w = row_weights[0];
        for (Py_ssize_t x = 0; x < row_length; x++)
            row_sums[x] = w * (uint32_t)line[x];
        for (int k = 1; k < rows->count[i]; k++) {
            line += row_length;
            w = row_weights[k];
            for (Py_ssize_t x = 0; x < row_length; x++)
                row_sums[x] += w * (uint32_t)line[x];
        }
        /* each output pixel: `taps` weighted column sums (row_sums is padded with zeros past
           the last column, where a short cell's unused taps, weighted 0, read) */
        uint8_t *out = target + i * out_width * channels;
        if (rgb_halving) {  /* written out, and rounded in a loop the compiler vectorizes */
            for (Py_ssize_t o = 0; o < out_width; o++) {
                const uint32_t *w = columns->weight + o * 3;
                const uint32_t *sums = row_sums + columns->first[o] * 3;
                uint32_t *total = totals + o * 3;
                total[0] = w[0] * sums[0] + w[1] * sums[3] + w[2] * sums[6];
                total[1] = w[0] * sums[1] + w[1] * sums[4] + w[2] * sums[7];
                total[2] = w[0] * sums[2] + w[1] * sums[5] + w[2] * sums[8];
            }
            for (Py_ssize_t x = 0; x < out_length; x++)
                out[x] = (uint8_t)(int32_t)(((double)(int32_t)totals[x] + bias) * reciprocal);
            continue;
        }
        for (Py_ssize_t o = 0; o < out_width; o++) {
            const uint32_t *column_weights = columns->weight + o * taps;
            const uint32_t *sums = row_sums + columns->first[o] * channels;
            for (Py_ssize_t c = 0; c < channels; c++) {
                uint64_t total = 0;
                for (int k = 0; k < taps; k++)
                    total += (uint64_t)column_weights[k] * sums[k * channels + c];
                out[o * channels + c] = (uint8_t)(((double)total + bias) * reciprocal);
            }
        }
    }
}

static PyObject *resize_uint8(PyObject *self, PyObject *args) {
    Py_buffer source, target;
    Py_ssize_t height, width, channels, out_height, out_width;
    if (!PyArg_ParseTuple(args, "y*w*nnnnn", &source, &target, &height, &width, &channels,
                          &out_height, &out_width))
        return NULL;
    PyObject *result = NULL;
    Axis rows = {0}, columns = {0};
    uint32_t *row_sums = NULL, *totals = NULL;
    if (height < 1 || width < 1 || channels < 1 || out_height < 1 || out_width < 1) {
        PyErr_Format(PyExc_ValueError, "sizes must be positive: %zd x %zd x %zd -> %zd x %zd",
                     height, width, channels, out_height, out_width);
        goto done;
    }
    /* the row sums must fit 32 bits; below 2**40 pixels the rounding's float64 error stays far
       inside its margin (see resize) */
    if ((uint64_t)height > UINT32_MAX / 255 ||
        (uint64_t)height * (uint64_t)width >= ((uint64_t)1 << 40)) {
        PyErr_SetString(PyExc_OverflowError, "image too large for the compiled resize");
        goto done;
    }
    if (source.len != height * width * channels ||
        target.len != out_height * out_width * channels) {
        PyErr_Format(PyExc_ValueError, "buffer sizes %zd and %zd do not match the shapes",
                     source.len, target.len);
        goto done;
    }
    if (axis_make(&rows, height, out_height) || axis_make(&columns, width, out_width) ||
        !(row_sums = calloc((size_t)(width + columns.taps) * channels, sizeof(uint32_t))) ||
        !(totals = malloc(sizeof(uint32_t) * out_width * channels))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    resize((const uint8_t *)source.buf, (uint8_t *)target.buf, width, channels, out_height,
           out_width, (uint64_t)height * (uint64_t)width, &rows, &columns, row_sums, totals);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    free(row_sums);
    free(totals);
    axis_free(&rows);
    axis_free(&columns);
    PyBuffer_Release(&source);
    PyBuffer_Release(&target);
    return result;
}

/* luma_pass(image, luma, levels, counts) for a uint8 RGB image of n pixels (C order): fills
 * `luma` (int32 [n]) with 299 R + 587 G + 114 B (BT.601 luma times 1000, exact), `levels`
 * (uint8 [n]) with the luma rounded to 0..255 ((luma + 500) / 1000), `counts` (int64 [256])
 * with each level's pixel count, and returns the channels' sums and sums of squares
 * (R, G, B, R^2, G^2, B^2) as integers. Why: in numpy these are ~8 whole-array passes and two
 * matrix products (~0.5 ms of a photo's analysis); here one pass over the pixels. */
static void luma(const uint8_t *image, Py_ssize_t pixels, int32_t *luma_out, uint8_t *levels,
                 int64_t *counts, uint64_t sums[6]) {
    for (Py_ssize_t p = 0; p < pixels; p++) {
        int32_t value = 299 * image[3 * p] + 587 * image[3 * p + 1] + 114 * image[3 * p + 2];
        luma_out[p] = value;
        levels[p] = (uint8_t)((value + 500) / 1000);
    }
    for (int level = 0; level < 256; level++)
        counts[level] = 0;
    for (Py_ssize_t p = 0; p < pixels; p++)
        counts[levels[p]]++;
    uint64_t r = 0, g = 0, b = 0, rr = 0, gg = 0, bb = 0;
    for (Py_ssize_t p = 0; p < pixels; p++) {
        uint32_t red = image[3 * p], green = image[3 * p + 1], blue = image[3 * p + 2];
        r += red;
        g += green;
        b += blue;
        rr += red * red;
        gg += green * green;
        bb += blue * blue;
    }
    sums[0] = r, sums[1] = g, sums[2] = b, sums[3] = rr, sums[4] = gg, sums[5] = bb;
}

static PyObject *luma_pass(PyObject *self, PyObject *args) {
    Py_buffer image, luma_out, levels, counts;
    if (!PyArg_ParseTuple(args, "y*w*w*w*", &image, &luma_out, &levels, &counts))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t pixels = image.len / 3;
    uint64_t sums[6];
    if (image.len % 3 || luma_out.len != pixels * (Py_ssize_t)sizeof(int32_t) ||
        levels.len != pixels || counts.len != 256 * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "buffer sizes %zd, %zd, %zd and %zd do not match",
                     image.len, luma_out.len, levels.len, counts.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    luma((const uint8_t *)image.buf, pixels, (int32_t *)luma_out.buf, (uint8_t *)levels.buf,
         (int64_t *)counts.buf, sums);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(KKKKKK)", (unsigned long long)sums[0], (unsigned long long)sums[1],
                           (unsigned long long)sums[2], (unsigned long long)sums[3],
                           (unsigned long long)sums[4], (unsigned long long)sums[5]);
done:
    PyBuffer_Release(&image);
    PyBuffer_Release(&luma_out);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&counts);
    return result;
}

static PyMethodDef methods[] = {
    {"luma_pass", luma_pass, METH_VARARGS,
     "luma_pass(image, luma, levels, counts) -> (R, G, B, R^2, G^2, B^2) sums: see the source."},
    {"resize_uint8", resize_uint8, METH_VARARGS,
     "resize_uint8(source, target, height, width, channels, out_height, out_width): the area "
     "average of source, rounded half up, written into target (both uint8, C order)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_analysis_kernel", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__analysis_kernel(void) { return PyModule_Create(&module); }
