"""The benchmarks, the quality evaluation and the scale simulation: tooling around the product
(`pixelmill bench ...`), never imported by the job or the reader."""
