/* The quality analysis's passes, compiled: the analysis copy's area resize
 * (transforms.offline.area_resize), the copy's luma, levels and channel sums, the hash's area
 * sums and the float metrics of the luma (transforms.offline.quality). Each gives the same
 * integers, or the same float64 bits, as the numpy form beside its caller, which stays the
 * reference (and the path where this is not built).
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
 *
 * order_statistics(luma, levels, counts, ranks) gives the order statistics of the luma's
 * percentiles (quality._order_statistics) from one pass over the pixels.
 *
 * float_moments(luma, height, width) gives the float metrics of quality._measure_luma (the
 * luma's mean and standard deviation, the Laplacian variances of the luma and of its half-size
 * copy) from the same float64 operations in the same order as numpy's calls there, so the
 * same bits: see its comment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
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

/* The resize's and the luma pass's loops in two builds, the one for the running CPU chosen
 * when the module loads (GCC's and Clang's function multiversioning, through glibc's ifunc):
 * AVX2 has the 32-bit multiplies and the wider conversions that the baseline x86-64 build
 * emulates (a 338 x 328 -> 256 x 248 copy 400 -> 270-285 us, a photo's luma pass 128 -> 99-111
 * us; float_moments gains nothing and keeps one build). Integer sums and the same two float64
 * roundings (no fused multiply-add: -ffp-contract=off) in both, so the same bytes (a test
 * builds the file with ONE_BUILD defined, the baseline only, and compares). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && !defined(ONE_BUILD)
#define CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CPU_CLONES
#endif

CPU_CLONES
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

/* area_sums(values, sums, height, width, out_height, out_width): `sums` (int64 [out_height,
 * out_width]) gets the area sums of `values` (int32 [height, width], C order), the weights
 * of `resize` (each cell's average is its sum / (height * width)): what area_resize.area_sums
 * gives, the same integers. Why: the perceptual hash's 32 x 32 sums of a photo's luma are
 * ~0.1 ms of numpy passes; here one pass. */
static void area_sum(const int32_t *values, int64_t *sums, Py_ssize_t width,
                     Py_ssize_t out_height, Py_ssize_t out_width, const Axis *rows,
                     const Axis *columns, int64_t *row_sums) {
    for (Py_ssize_t i = 0; i < out_height; i++) {
        const uint32_t *row_weights = rows->weight + i * rows->taps;
        const int32_t *line = values + rows->first[i] * width;
        for (Py_ssize_t x = 0; x < width; x++)
            row_sums[x] = (int64_t)row_weights[0] * line[x];
        for (int k = 1; k < rows->count[i]; k++) {
            line += width;
            const int64_t w = row_weights[k];
            for (Py_ssize_t x = 0; x < width; x++)
                row_sums[x] += w * line[x];
        }
        for (Py_ssize_t o = 0; o < out_width; o++) {
            const uint32_t *w = columns->weight + o * columns->taps;
            const int64_t *cells = row_sums + columns->first[o];
            int64_t total = 0;
            for (int k = 0; k < columns->taps; k++)  /* past the last column: weight 0, pad 0 */
                total += (int64_t)w[k] * cells[k];
            sums[i * out_width + o] = total;
        }
    }
}

static PyObject *area_sums(PyObject *self, PyObject *args) {
    Py_buffer values, sums;
    Py_ssize_t height, width, out_height, out_width;
    if (!PyArg_ParseTuple(args, "y*w*nnnn", &values, &sums, &height, &width, &out_height,
                          &out_width))
        return NULL;
    PyObject *result = NULL;
    Axis rows = {0}, columns = {0};
    int64_t *row_sums = NULL;
    if (height < 1 || width < 1 || out_height < 1 || out_width < 1) {
        PyErr_Format(PyExc_ValueError, "sizes must be positive: %zd x %zd -> %zd x %zd",
                     height, width, out_height, out_width);
        goto done;
    }
    /* |value| < 2**31 times a cell's weights (at most height * width in all) fits 63 bits */
    if ((uint64_t)height * (uint64_t)width >= ((uint64_t)1 << 32)) {
        PyErr_SetString(PyExc_OverflowError, "values too large for the compiled area sums");
        goto done;
    }
    if (values.len != height * width * (Py_ssize_t)sizeof(int32_t) ||
        sums.len != out_height * out_width * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "buffer sizes %zd and %zd do not match the shapes",
                     values.len, sums.len);
        goto done;
    }
    if (axis_make(&rows, height, out_height) || axis_make(&columns, width, out_width) ||
        !(row_sums = calloc((size_t)(width + columns.taps), sizeof(int64_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    area_sum((const int32_t *)values.buf, (int64_t *)sums.buf, width, out_height, out_width,
             &rows, &columns, row_sums);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    free(row_sums);
    axis_free(&rows);
    axis_free(&columns);
    PyBuffer_Release(&values);
    PyBuffer_Release(&sums);
    return result;
}

/* luma_pass(image, luma, levels, counts) for a uint8 RGB image of n pixels (C order): fills
 * `luma` (int32 [n]) with 299 R + 587 G + 114 B (BT.601 luma times 1000, exact), `levels`
 * (uint8 [n]) with the luma rounded to 0..255 ((luma + 500) / 1000), `counts` (int64 [256])
 * with each level's pixel count, and returns the channels' sums and sums of squares
 * (R, G, B, R^2, G^2, B^2) as integers. Why: in numpy these are ~8 whole-array passes and two
 * matrix products (~0.5 ms of a photo's analysis); here one pass over the pixels. */
CPU_CLONES
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

/* float_moments(luma, height, width) -> (mean, std, laplacian variance, half-size copy's
 * Laplacian variance) of the float luma (luma / 1000.0; luma int32 [height, width], C order):
 * what quality._float_moments_numpy computes with ~30 numpy calls (~0.1 ms a thumbnail, ~0.4
 * ms a photo). The same bits, because each value is the same float64 operations in the same
 * order: elementwise arithmetic is IEEE (the file is compiled without contracting a multiply
 * and an add into one rounding, setup.py's -ffp-contract=off), and every sum is numpy's
 * pairwise summation of a contiguous float64 array (`pairwise`: numpy's `pairwise_sum`, which
 * `np.add.reduce` runs over a whole contiguous array, added to its identity 0.0). A variance
 * is numpy's `_var`: the sum / n, each value less that mean, squared, summed, / n. A variance
 * of a side below 3 pixels is 0.0, as the numpy form returns. tests/test_analysis_kernel.py
 * compares the two forms bit for bit. */
static double pairwise(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double res = 0.;
        for (Py_ssize_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        Py_ssize_t i;
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2) + pairwise(a + n2, n - n2);
}

/* numpy's `values.mean()` of n > 0 contiguous float64 values */
static double mean_of(const double *values, Py_ssize_t n) {
    return (0. + pairwise(values, n)) / (double)n;
}

/* numpy's `values.var()` of the same values given that mean (numpy's `_var` takes it first;
 * `scratch`: n doubles) */
static double variance(const double *values, Py_ssize_t n, double mean, double *scratch) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const double deviation = values[i] - mean;
        scratch[i] = deviation * deviation;
    }
    return (0. + pairwise(scratch, n)) / (double)n;
}

/* the variance of the 4-neighbour Laplacian of `plane` (float64 [height, width]) over its valid
 * region, as quality._laplacian_var: ((up + down) + left) + right - 4.0 * centre */
static double laplacian_variance(const double *plane, Py_ssize_t height, Py_ssize_t width,
                                 double *laplacian, double *scratch) {
    if (height < 3 || width < 3)
        return 0.;
    Py_ssize_t k = 0;
    for (Py_ssize_t y = 1; y < height - 1; y++) {
        const double *row = plane + y * width;
        for (Py_ssize_t x = 1; x < width - 1; x++)
            laplacian[k++] = row[x - width] + row[x + width] + row[x - 1] + row[x + 1]
                             - 4.0 * row[x];
    }
    return variance(laplacian, k, mean_of(laplacian, k), scratch);
}

static void float_moments_of(const int32_t *luma, Py_ssize_t height, Py_ssize_t width,
                             double *plane, double *half, double *laplacian, double *scratch,
                             double out[4]) {
    const Py_ssize_t n = height * width;
    for (Py_ssize_t i = 0; i < n; i++)
        plane[i] = (double)luma[i] / 1000.0;
    out[0] = mean_of(plane, n);  /* the brightness mean, and the deviations' centre */
    out[1] = sqrt(variance(plane, n, out[0], scratch));
    out[2] = laplacian_variance(plane, height, width, laplacian, scratch);
    /* the half-size copy: 2x2 blocks summed in integers (an odd last row or column left out) */
    const Py_ssize_t half_height = height / 2, half_width = width / 2;
    for (Py_ssize_t y = 0; y < half_height; y++) {
        const int32_t *top = luma + 2 * y * width, *bottom = top + width;
        for (Py_ssize_t x = 0; x < half_width; x++)
            half[y * half_width + x] = (double)(top[2 * x] + bottom[2 * x] + top[2 * x + 1]
                                                + bottom[2 * x + 1]) / 4000.0;
    }
    out[3] = laplacian_variance(half, half_height, half_width, laplacian, scratch);
}

static PyObject *float_moments(PyObject *self, PyObject *args) {
    Py_buffer luma;
    Py_ssize_t height, width;
    if (!PyArg_ParseTuple(args, "y*nn", &luma, &height, &width))
        return NULL;
    PyObject *result = NULL;
    double *buffers = NULL, out[4];
    if (height < 1 || width < 1 || luma.len != height * width * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_Format(PyExc_ValueError, "a luma buffer of %zd bytes does not match %zd x %zd",
                     luma.len, height, width);
        goto done;
    }
    /* the plane, the half-size copy, the Laplacian and the squared deviations */
    const Py_ssize_t n = height * width;
    if (!(buffers = malloc(sizeof(double) * (3 * n + n / 4 + 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    float_moments_of((const int32_t *)luma.buf, height, width, buffers, buffers + n,
                     buffers + n + n / 4 + 1, buffers + 2 * n + n / 4 + 1, out);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(dddd)", out[0], out[1], out[2], out[3]);
done:
    free(buffers);
    PyBuffer_Release(&luma);
    return result;
}

/* order_statistics(luma, levels, counts, ranks) -> [the rank-th smallest luma value for each
 * rank of `ranks`, an ascending sequence of ints], for luma (int32 [n]) whose levels ((luma +
 * 500) / 1000, uint8 [n]) have the pixel counts `counts` (int64 [256]): what
 * quality._order_statistics_numpy finds. A rank's value lies in the level whose cumulative count
 * first exceeds it, and a level's luma spans 1000 values, so one pass over the pixels counts
 * the values of the (at most 8) levels the ranks fall in, and each rank is read off its level's
 * counts. Why: numpy gathers each such level's pixels through a boolean mask and sorts them
 * (~35 us of a thumbnail's ~140 us analysis). Exact integers: the same values. */
#define MAX_RANKS 8
#define LEVEL_SPAN 1000

static PyObject *order_statistics(PyObject *self, PyObject *args) {
    Py_buffer luma, levels, counts;
    PyObject *ranks_arg;
    if (!PyArg_ParseTuple(args, "y*y*y*O", &luma, &levels, &counts, &ranks_arg))
        return NULL;
    PyObject *result = NULL, *ranks = NULL;
    uint32_t *histograms = NULL;
    const Py_ssize_t n = luma.len / (Py_ssize_t)sizeof(int32_t);
    if (luma.len % (Py_ssize_t)sizeof(int32_t) || levels.len != n ||
        counts.len != 256 * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "buffer sizes %zd, %zd and %zd do not match",
                     luma.len, levels.len, counts.len);
        goto done;
    }
    if (!(ranks = PySequence_Fast(ranks_arg, "ranks must be a sequence")))
        goto done;
    const Py_ssize_t k = PySequence_Fast_GET_SIZE(ranks);
    if (k < 1 || k > MAX_RANKS) {
        PyErr_Format(PyExc_ValueError, "1 to %d ranks, not %zd", MAX_RANKS, k);
        goto done;
    }
    Py_ssize_t rank[MAX_RANKS], start[MAX_RANKS];
    int slot_of_rank[MAX_RANKS], level_of_slot[MAX_RANKS], slots = 0, slot_of_level[256];
    for (int level = 0; level < 256; level++)
        slot_of_level[level] = -1;
    const int64_t *count = (const int64_t *)counts.buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        rank[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(ranks, i));
        if (rank[i] == -1 && PyErr_Occurred())
            goto done;
        if (rank[i] < 0 || rank[i] >= n || (i && rank[i] < rank[i - 1])) {
            PyErr_Format(PyExc_ValueError, "ranks must ascend within 0..%zd", n - 1);
            goto done;
        }
        int64_t end = 0;
        int level = 0;
        for (; level < 256; level++) {  /* the first level whose cumulative count passes it */
            if (count[level] < 0)
                break;
            if (end + count[level] > rank[i])
                break;
            end += count[level];
        }
        if (level == 256 || count[level] < 0) {
            PyErr_SetString(PyExc_ValueError, "the counts do not cover the ranks");
            goto done;
        }
        start[i] = (Py_ssize_t)end;
        if (slot_of_level[level] < 0) {
            slot_of_level[level] = slots;
            level_of_slot[slots++] = level;
        }
        slot_of_rank[i] = slot_of_level[level];
    }
    if (!(histograms = calloc((size_t)slots * LEVEL_SPAN, sizeof(uint32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *value = (const int32_t *)luma.buf;
    const uint8_t *level_of = (const uint8_t *)levels.buf;
    int misplaced = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t p = 0; p < n; p++) {
        const int slot = slot_of_level[level_of[p]];
        if (slot >= 0) {
            const int64_t offset = (int64_t)value[p] - ((int64_t)level_of[p] * LEVEL_SPAN - 500);
            if (offset < 0 || offset >= LEVEL_SPAN)
                misplaced = 1;
            else
                histograms[slot * LEVEL_SPAN + offset]++;
        }
    }
    Py_END_ALLOW_THREADS
    if (misplaced) {
        PyErr_SetString(PyExc_ValueError, "a pixel's level is not (luma + 500) / 1000");
        goto done;
    }
    if (!(result = PyList_New(k)))
        goto done;
    for (Py_ssize_t i = 0; i < k; i++) {
        const uint32_t *histogram = histograms + slot_of_rank[i] * LEVEL_SPAN;
        const int level = level_of_slot[slot_of_rank[i]];
        Py_ssize_t seen = 0, within = rank[i] - start[i];
        int offset = 0;
        for (; offset < LEVEL_SPAN; offset++) {
            seen += histogram[offset];
            if (seen > within)
                break;
        }
        if (offset == LEVEL_SPAN) {
            PyErr_SetString(PyExc_ValueError, "the counts do not match the levels");
            Py_CLEAR(result);
            goto done;
        }
        PyObject *found = PyLong_FromLong((long)level * LEVEL_SPAN - 500 + offset);
        if (!found) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, found);
    }
done:
    free(histograms);
    Py_XDECREF(ranks);
    PyBuffer_Release(&luma);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&counts);
    return result;
}

static PyMethodDef methods[] = {
    {"luma_pass", luma_pass, METH_VARARGS,
     "luma_pass(image, luma, levels, counts) -> (R, G, B, R^2, G^2, B^2) sums: see the source."},
    {"area_sums", area_sums, METH_VARARGS,
     "area_sums(values, sums, height, width, out_height, out_width): the area sums of values "
     "(int32) written into sums (int64), both C order."},
    {"float_moments", float_moments, METH_VARARGS,
     "float_moments(luma, height, width) -> (mean, std, laplacian variance, half-size copy's "
     "laplacian variance) of luma / 1000.0, numpy's bits: see the source."},
    {"order_statistics", order_statistics, METH_VARARGS,
     "order_statistics(luma, levels, counts, ranks) -> the rank-th smallest luma value for each "
     "ascending rank: see the source."},
    {"resize_uint8", resize_uint8, METH_VARARGS,
     "resize_uint8(source, target, height, width, channels, out_height, out_width): the area "
     "average of source, rounded half up, written into target (both uint8, C order)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_analysis_kernel", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__analysis_kernel(void) { return PyModule_Create(&module); }
