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
 *
 * analyse(image, probabilities, height, width, dct, center) runs all of these that
 * quality.analyse needs on the analysis copy, and the perceptual hashes, in one call: see its
 * comment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The resize's, the luma pass's and the area sums' loops in two builds, the one for the
 * running CPU chosen when the module loads (GCC's and Clang's function multiversioning, through
 * glibc's ifunc): AVX2 has the 32-bit multiplies and the wider conversions that the baseline
 * x86-64 build emulates (a 338 x 328 -> 256 x 248 copy 400 -> 270-285 us, a photo's luma pass
 * 128 -> 99-111 us, a thumbnail's hash sums ~3 us less; float_moments gains nothing and keeps
 * one build). Integer sums and the same two float64 roundings (no fused multiply-add:
 * -ffp-contract=off) in both, so the same bytes (a test builds the file with ONE_BUILD defined,
 * the baseline only, and compares). */
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
CPU_CLONES
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

/* `area_sum` with its axes and row buffer made and freed here: 0, or -1 for no memory (needs no
 * interpreter) */
static int area_sums_of(const int32_t *values, int64_t *sums, Py_ssize_t height,
                        Py_ssize_t width, Py_ssize_t out_height, Py_ssize_t out_width) {
    Axis rows = {0}, columns = {0};
    int64_t *row_sums = NULL;
    int status = -1;
    if (!axis_make(&rows, height, out_height) && !axis_make(&columns, width, out_width) &&
        (row_sums = calloc((size_t)(width + columns.taps), sizeof(int64_t)))) {
        area_sum(values, sums, width, out_height, out_width, &rows, &columns, row_sums);
        status = 0;
    }
    free(row_sums);
    axis_free(&rows);
    axis_free(&columns);
    return status;
}

static PyObject *area_sums(PyObject *self, PyObject *args) {
    Py_buffer values, sums;
    Py_ssize_t height, width, out_height, out_width;
    if (!PyArg_ParseTuple(args, "y*w*nnnn", &values, &sums, &height, &width, &out_height,
                          &out_width))
        return NULL;
    PyObject *result = NULL;
    int failed;
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
    Py_BEGIN_ALLOW_THREADS
    failed = area_sums_of((const int32_t *)values.buf, (int64_t *)sums.buf, height, width,
                          out_height, out_width);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
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
    uint64_t r = 0, g = 0, b = 0, rr = 0, gg = 0, bb = 0;
    /* the channel sums in 32 bits over runs of 65536 pixels (a run's squares stay below 2**32),
       added to the 64-bit ones after each run, in the loop that reads the pixels for the luma:
       the same integers, with ~40% of the sums' CPU (~10 -> ~4 us a thumbnail) */
    for (Py_ssize_t run = 0; run < pixels; run += 65536) {
        const Py_ssize_t end = pixels - run < 65536 ? pixels : run + 65536;
        uint32_t r32 = 0, g32 = 0, b32 = 0, rr32 = 0, gg32 = 0, bb32 = 0;
        for (Py_ssize_t p = run; p < end; p++) {
            const uint32_t red = image[3 * p], green = image[3 * p + 1], blue = image[3 * p + 2];
            const int32_t value = 299 * red + 587 * green + 114 * blue;
            luma_out[p] = value;
            levels[p] = (uint8_t)((value + 500) / 1000);
            r32 += red;
            g32 += green;
            b32 += blue;
            rr32 += red * red;
            gg32 += green * green;
            bb32 += blue * blue;
        }
        r += r32, g += g32, b += b32, rr += rr32, gg += gg32, bb += bb32;
    }
    for (int level = 0; level < 256; level++)
        counts[level] = 0;
    for (Py_ssize_t p = 0; p < pixels; p++)
        counts[levels[p]]++;
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
 * is numpy's `_var`: the sum / n, each value less that mean, squared, summed, / n (the squares
 * made where the sum adds them, `pairwise_squares`: the same terms, one pass less). A variance
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

/* `pairwise` of the squared deviations of `a` from `mean`, each made where it is added: the
 * same terms in the same order as numpy's sum of the array of them */
static double pairwise_squares(const double *a, Py_ssize_t n, double mean) {
#define SQUARE(x) (((x) - mean) * ((x) - mean))
    if (n < 8) {
        double res = 0.;
        for (Py_ssize_t i = 0; i < n; i++)
            res += SQUARE(a[i]);
        return res;
    }
    if (n <= 128) {
        double r[8];
        Py_ssize_t i;
        for (int j = 0; j < 8; j++)
            r[j] = SQUARE(a[j]);
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += SQUARE(a[i + j]);
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += SQUARE(a[i]);
        return res;
    }
#undef SQUARE
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_squares(a, n2, mean) + pairwise_squares(a + n2, n - n2, mean);
}

/* numpy's `values.var()` of the same values given that mean (numpy's `_var` takes it first) */
static double variance(const double *values, Py_ssize_t n, double mean) {
    return (0. + pairwise_squares(values, n, mean)) / (double)n;
}

/* the variance of the 4-neighbour Laplacian of `plane` (float64 [height, width]) over its valid
 * region, as quality._laplacian_var: ((up + down) + left) + right - 4.0 * centre */
static double laplacian_variance(const double *plane, Py_ssize_t height, Py_ssize_t width,
                                 double *laplacian) {
    if (height < 3 || width < 3)
        return 0.;
    Py_ssize_t k = 0;
    for (Py_ssize_t y = 1; y < height - 1; y++) {
        const double *row = plane + y * width;
        for (Py_ssize_t x = 1; x < width - 1; x++)
            laplacian[k++] = row[x - width] + row[x + width] + row[x - 1] + row[x + 1]
                             - 4.0 * row[x];
    }
    return variance(laplacian, k, mean_of(laplacian, k));
}

/* the four values into `out`; -1: no memory (needs no interpreter) */
static int float_moments_of(const int32_t *luma, Py_ssize_t height, Py_ssize_t width,
                            double out[4]) {
    const Py_ssize_t n = height * width;
    /* the plane, the half-size copy and the Laplacian */
    double *plane = malloc(sizeof(double) * (2 * n + n / 4 + 1));
    if (!plane)
        return -1;
    double *half = plane + n, *laplacian = plane + n + n / 4 + 1;
    for (Py_ssize_t i = 0; i < n; i++)
        plane[i] = (double)luma[i] / 1000.0;
    out[0] = mean_of(plane, n);  /* the brightness mean, and the deviations' centre */
    out[1] = sqrt(variance(plane, n, out[0]));
    out[2] = laplacian_variance(plane, height, width, laplacian);
    /* the half-size copy: 2x2 blocks summed in integers (an odd last row or column left out) */
    const Py_ssize_t half_height = height / 2, half_width = width / 2;
    for (Py_ssize_t y = 0; y < half_height; y++) {
        const int32_t *top = luma + 2 * y * width, *bottom = top + width;
        for (Py_ssize_t x = 0; x < half_width; x++)
            half[y * half_width + x] = (double)(top[2 * x] + bottom[2 * x] + top[2 * x + 1]
                                                + bottom[2 * x + 1]) / 4000.0;
    }
    out[3] = laplacian_variance(half, half_height, half_width, laplacian);
    free(plane);
    return 0;
}

static PyObject *float_moments(PyObject *self, PyObject *args) {
    Py_buffer luma;
    Py_ssize_t height, width;
    if (!PyArg_ParseTuple(args, "y*nn", &luma, &height, &width))
        return NULL;
    PyObject *result = NULL;
    double out[4];
    int failed;
    if (height < 1 || width < 1 || luma.len != height * width * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_Format(PyExc_ValueError, "a luma buffer of %zd bytes does not match %zd x %zd",
                     luma.len, height, width);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    failed = float_moments_of((const int32_t *)luma.buf, height, width, out);
    Py_END_ALLOW_THREADS
    result = failed ? PyErr_NoMemory()
                    : Py_BuildValue("(dddd)", out[0], out[1], out[2], out[3]);
done:
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

/* The order statistics of `k` ranks (each < n, in any order, repeats allowed) into `out`: 0, or
 * ORDER_COVER (the counts do not cover a rank), ORDER_MISPLACED (a pixel's level is not its
 * luma's), ORDER_LEVELS (the counts do not match the levels), ORDER_MEMORY. Needs no
 * interpreter (the caller may have released it); the caller turns a status into its exception
 * (`order_error`). */
enum { ORDER_COVER = 1, ORDER_MISPLACED, ORDER_LEVELS, ORDER_MEMORY };

static int order_stats_of(const int32_t *value, const uint8_t *level_of, const int64_t *count,
                          Py_ssize_t n, const Py_ssize_t *rank, Py_ssize_t k, int64_t *out) {
    Py_ssize_t start[MAX_RANKS];
    int slot_of_rank[MAX_RANKS], level_of_slot[MAX_RANKS], slots = 0, slot_of_level[256];
    for (int level = 0; level < 256; level++)
        slot_of_level[level] = -1;
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t end = 0;
        int level = 0;
        for (; level < 256; level++) {  /* the first level whose cumulative count passes it */
            if (count[level] < 0)
                break;
            if (end + count[level] > rank[i])
                break;
            end += count[level];
        }
        if (level == 256 || count[level] < 0)
            return ORDER_COVER;
        start[i] = (Py_ssize_t)end;
        if (slot_of_level[level] < 0) {
            slot_of_level[level] = slots;
            level_of_slot[slots++] = level;
        }
        slot_of_rank[i] = slot_of_level[level];
    }
    uint32_t *histograms = calloc((size_t)slots * LEVEL_SPAN, sizeof(uint32_t));
    if (!histograms)
        return ORDER_MEMORY;
    int status = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        const int slot = slot_of_level[level_of[p]];
        if (slot >= 0) {
            const int64_t offset = (int64_t)value[p] - ((int64_t)level_of[p] * LEVEL_SPAN - 500);
            if (offset < 0 || offset >= LEVEL_SPAN)
                status = ORDER_MISPLACED;
            else
                histograms[slot * LEVEL_SPAN + offset]++;
        }
    }
    for (Py_ssize_t i = 0; i < k && !status; i++) {
        const uint32_t *histogram = histograms + slot_of_rank[i] * LEVEL_SPAN;
        Py_ssize_t seen = 0, within = rank[i] - start[i];
        int offset = 0;
        for (; offset < LEVEL_SPAN; offset++) {
            seen += histogram[offset];
            if (seen > within)
                break;
        }
        if (offset == LEVEL_SPAN)
            status = ORDER_LEVELS;
        else
            out[i] = (int64_t)level_of_slot[slot_of_rank[i]] * LEVEL_SPAN - 500 + offset;
    }
    free(histograms);
    return status;
}

static void order_error(int status) {
    if (status == ORDER_MEMORY)
        PyErr_NoMemory();
    else
        PyErr_SetString(PyExc_ValueError,
                        status == ORDER_COVER ? "the counts do not cover the ranks"
                        : status == ORDER_MISPLACED ? "a pixel's level is not (luma + 500) / 1000"
                        : "the counts do not match the levels");
}

static PyObject *order_statistics(PyObject *self, PyObject *args) {
    Py_buffer luma, levels, counts;
    PyObject *ranks_arg;
    if (!PyArg_ParseTuple(args, "y*y*y*O", &luma, &levels, &counts, &ranks_arg))
        return NULL;
    PyObject *result = NULL, *ranks = NULL;
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
    Py_ssize_t rank[MAX_RANKS];
    int64_t found[MAX_RANKS];
    for (Py_ssize_t i = 0; i < k; i++) {
        rank[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(ranks, i));
        if (rank[i] == -1 && PyErr_Occurred())
            goto done;
        if (rank[i] < 0 || rank[i] >= n || (i && rank[i] < rank[i - 1])) {
            PyErr_Format(PyExc_ValueError, "ranks must ascend within 0..%zd", n - 1);
            goto done;
        }
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = order_stats_of((const int32_t *)luma.buf, (const uint8_t *)levels.buf,
                            (const int64_t *)counts.buf, n, rank, k, found);
    Py_END_ALLOW_THREADS
    if (status) {
        order_error(status);
        goto done;
    }
    if (!(result = PyList_New(k)))
        goto done;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *value = PyLong_FromLongLong((long long)found[i]);
        if (!value) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, value);
    }
done:
    Py_XDECREF(ranks);
    PyBuffer_Release(&luma);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&counts);
    return result;
}

/* analyse(image, probabilities, height, width, dct, center) -> (R, G, B, R^2, G^2, B^2 sums,
 * mean, std, Laplacian variance, the half-size copy's, p01, p99, hash, centre hash or None,
 * k): the whole of quality.analyse's luma-side work on the analysis copy (uint8 RGB [height,
 * width], C order) in one call; the first k of `probabilities` (float64 [256]) get the share of
 * the pixels of each level that has any (count / pixels, as numpy divides), for the entropy,
 * which stays numpy's (its log2). `dct`: the first 8 rows of quality's 32-point DCT
 * matrix (float64 [8, 32]); `center`: (top, left, height, width) of the centre crop, or None.
 * Why: the separate calls and the numpy glue between them (~25 calls: allocations, the
 * percentiles' arithmetic, the hash's matrix products, rounding, median and bits) were ~40 us
 * of a thumbnail's ~100 us analysis. The same integers and float64 bits as the separate calls
 * and quality's numpy forms: the luma pass, the order statistics and the float moments are the
 * functions above; the percentiles are np.percentile's float64 steps in order; the hash's
 * coefficients are sums of products in another order than numpy's matrix product (BLAS),
 * which moves their last bits, but they are rounded to 6 decimals before they are compared,
 * as quality.perceptual_hash documents, so the bits of the hash do not move. */
#define HASH_SIDE 32
#define HASH_LOW 8

static void percentile_plan(Py_ssize_t n, Py_ssize_t previous[2], Py_ssize_t following[2],
                            double gamma[2]) {
    const double q[2] = {1.0 / 100.0, 99.0 / 100.0};  /* np.true_divide([1, 99], 100) */
    const Py_ssize_t last = n - 1;
    for (int i = 0; i < 2; i++) {
        const double virtual = (double)last * q[i];
        const int at_end = virtual >= (double)last;
        previous[i] = at_end ? last : (Py_ssize_t)floor(virtual);
        following[i] = at_end ? last : previous[i] + 1;
        gamma[i] = virtual - (at_end ? -1.0 : (double)previous[i]);
    }
}

static double lerp(int64_t low, int64_t high, double weight) {
    const double a = (double)low / 1000.0, b = (double)high / 1000.0, difference = b - a;
    return weight >= 0.5 ? b - difference * (1.0 - weight) : a + difference * weight;
}

static int compare_doubles(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The 64 hash bits of the luma (int32 [height, width], C order): its 32 x 32 area sums, each
 * over height * width * 1000, the top-left 8 x 8 of the DCT, rounded to 6 decimals (numpy's
 * np.round: rint(x * 1e6) / 1e6), each compared with the median of the 63 AC terms. -1: no
 * memory. */
static int hash_bits(const int32_t *luma, Py_ssize_t height, Py_ssize_t width,
                     const double *dct, uint64_t *bits) {
    int64_t sums[HASH_SIDE * HASH_SIDE];
    if (area_sums_of(luma, sums, height, width, HASH_SIDE, HASH_SIDE))
        return -1;
    const double scale = (double)(height * width) * 1000.0;
    double plane[HASH_SIDE * HASH_SIDE], half[HASH_LOW * HASH_SIDE], low[HASH_LOW * HASH_LOW];
    for (int i = 0; i < HASH_SIDE * HASH_SIDE; i++)
        plane[i] = (double)sums[i] / scale;
    for (int i = 0; i < HASH_LOW; i++)  /* the DCT's rows times the plane */
        for (int x = 0; x < HASH_SIDE; x++) {
            double total = 0.;
            for (int m = 0; m < HASH_SIDE; m++)
                total += dct[i * HASH_SIDE + m] * plane[m * HASH_SIDE + x];
            half[i * HASH_SIDE + x] = total;
        }
    for (int i = 0; i < HASH_LOW; i++)  /* times the DCT's transpose */
        for (int j = 0; j < HASH_LOW; j++) {
            double total = 0.;
            for (int x = 0; x < HASH_SIDE; x++)
                total += half[i * HASH_SIDE + x] * dct[j * HASH_SIDE + x];
            low[i * HASH_LOW + j] = rint(total * 1e6) / 1e6;
        }
    double ac[HASH_LOW * HASH_LOW - 1];
    memcpy(ac, low + 1, sizeof(ac));
    qsort(ac, HASH_LOW * HASH_LOW - 1, sizeof(double), compare_doubles);
    const double median = ac[(HASH_LOW * HASH_LOW - 1) / 2];
    uint64_t value = 0;
    for (int i = 0; i < HASH_LOW * HASH_LOW; i++)
        value = (value << 1) | (low[i] > median);
    *bits = value;
    return 0;
}

static PyObject *analyse(PyObject *self, PyObject *args) {
    Py_buffer image, probabilities, dct;
    Py_ssize_t height, width, crop[4] = {0, 0, 0, 0};
    PyObject *center;
    if (!PyArg_ParseTuple(args, "y*w*nny*O", &image, &probabilities, &height, &width, &dct,
                          &center))
        return NULL;
    PyObject *result = NULL;
    int32_t *luma_1000 = NULL, *cropped = NULL;
    uint8_t *levels = NULL;
    const Py_ssize_t n = height * width;
    if (height < 1 || width < 1 || image.len != n * 3 ||
        probabilities.len != 256 * (Py_ssize_t)sizeof(double) ||
        dct.len != HASH_LOW * HASH_SIDE * (Py_ssize_t)sizeof(double)) {
        PyErr_Format(PyExc_ValueError, "buffer sizes %zd, %zd and %zd do not match %zd x %zd",
                     image.len, probabilities.len, dct.len, height, width);
        goto done;
    }
    if ((uint64_t)n >= ((uint64_t)1 << 32)) {  /* the area sums' bound (area_sums) */
        PyErr_SetString(PyExc_OverflowError, "an image too large for the compiled analysis");
        goto done;
    }
    if (center != Py_None) {
        if (!PyArg_ParseTuple(center, "nnnn", &crop[0], &crop[1], &crop[2], &crop[3]))
            goto done;
        if (crop[0] < 0 || crop[1] < 0 || crop[2] < 1 || crop[3] < 1 ||
            crop[0] + crop[2] > height || crop[1] + crop[3] > width) {
            PyErr_Format(PyExc_ValueError, "the centre (%zd, %zd, %zd, %zd) is not inside "
                         "%zd x %zd", crop[0], crop[1], crop[2], crop[3], height, width);
            goto done;
        }
    }
    luma_1000 = malloc(sizeof(int32_t) * n);
    levels = malloc((size_t)n);
    if (center != Py_None)
        cropped = malloc(sizeof(int32_t) * crop[2] * crop[3]);
    if (!luma_1000 || !levels || (center != Py_None && !cropped)) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t sums[6], phash = 0, center_phash = 0;
    double moments[4], gamma[2];
    Py_ssize_t previous[2], following[2], ranks[4];
    int64_t found[4];
    int status = 0, hashed = 0, failed = 0;
    int64_t count[256];
    double *share = (double *)probabilities.buf;
    Py_ssize_t levels_seen = 0;
    Py_BEGIN_ALLOW_THREADS
    luma((const uint8_t *)image.buf, n, luma_1000, levels, count, sums);
    percentile_plan(n, previous, following, gamma);
    ranks[0] = previous[0], ranks[1] = following[0], ranks[2] = previous[1],
    ranks[3] = following[1];
    for (int level = 0; level < 256; level++)
        if (count[level] > 0)
            share[levels_seen++] = (double)count[level] / (double)n;
    status = order_stats_of(luma_1000, levels, count, n, ranks, 4, found);
    failed = float_moments_of(luma_1000, height, width, moments);
    hashed = hash_bits(luma_1000, height, width, (const double *)dct.buf, &phash);
    if (!hashed && center != Py_None) {
        for (Py_ssize_t y = 0; y < crop[2]; y++)
            memcpy(cropped + y * crop[3], luma_1000 + (crop[0] + y) * width + crop[1],
                   sizeof(int32_t) * crop[3]);
        hashed = hash_bits(cropped, crop[2], crop[3], (const double *)dct.buf, &center_phash);
    }
    Py_END_ALLOW_THREADS
    if (status) {
        order_error(status);
        goto done;
    }
    if (hashed || failed) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *center_value = center == Py_None ? Py_None
                             : PyLong_FromUnsignedLongLong((unsigned long long)center_phash);
    if (!center_value)
        goto done;
    if (center_value == Py_None)
        Py_INCREF(Py_None);
    result = Py_BuildValue(
        "(KKKKKKddddddKNn)", (unsigned long long)sums[0], (unsigned long long)sums[1],
        (unsigned long long)sums[2], (unsigned long long)sums[3], (unsigned long long)sums[4],
        (unsigned long long)sums[5], moments[0], moments[1], moments[2], moments[3],
        lerp(found[0], found[1], gamma[0]), lerp(found[2], found[3], gamma[1]),
        (unsigned long long)phash, center_value, levels_seen);
done:
    free(luma_1000);
    free(levels);
    free(cropped);
    PyBuffer_Release(&image);
    PyBuffer_Release(&probabilities);
    PyBuffer_Release(&dct);
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
    {"analyse", analyse, METH_VARARGS,
     "analyse(image, probabilities, height, width, dct, center) -> (channel sums, float "
     "moments, percentiles, hash, centre hash, levels seen): quality.analyse's luma-side work, "
     "see the source."},
    {"resize_uint8", resize_uint8, METH_VARARGS,
     "resize_uint8(source, target, height, width, channels, out_height, out_width): the area "
     "average of source, rounded half up, written into target (both uint8, C order)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_analysis_kernel", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__analysis_kernel(void) { return PyModule_Create(&module); }
